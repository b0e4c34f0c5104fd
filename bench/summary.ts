// The README's "Speed" figures: every headline figure as min–max over every sample of every recorded run of the
// current bench version (bench/results/runs.jsonl), with the median beside it, the number of runs and the
// machine's load over them.
// Never one favourable run.
//   npm exec -- node bench/summary.ts
//   BENCH_SINCE=2026-11-23T22:00Z npm exec -- node bench/summary.ts   # only runs measured since then (after a change)
import { readFileSync } from 'node:fs';
import { BENCH_VERSION, HISTORY_FILE, printTable, type Cell, type HistoryLine } from './support/report.ts';
import { median, range } from './support/rounds.ts';

const SINCE = process.env.BENCH_SINCE ? Date.parse(process.env.BENCH_SINCE) : undefined;
if (SINCE !== undefined && Number.isNaN(SINCE)) throw new Error(`BENCH_SINCE: expected an ISO date and time, got "${process.env.BENCH_SINCE}"`);
const lines = (() => {
  try {
    return readFileSync(HISTORY_FILE, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as HistoryLine);
  } catch {
    return [];
  }
})().filter((l) => l.version === BENCH_VERSION && (!SINCE || Date.parse(l.measured_at) >= SINCE));
/**
 * Runs with the gateway's flags replaced (BENCH_GATEWAY_FLAGS, even ""), with extra node flags for the gateway, or
 * with the gateway on a Unix socket to Redis (BENCH_REDIS_UNIX), and streams paced other than the goal's
 * (BENCH_CHUNK_DELAY_MS) are experiments (see bench/README.md), not the figure as shipped; so are runs marked by hand
 * with the environment they ran in (`env_experiment`, e.g. MALLOC_ARENA_MAX=2).
 */
const experiment = (l: HistoryLine): boolean => l.figures.gateway_flags_experiment !== undefined || ((l.figures.gateway_node_args as string[] | undefined)?.length ?? 0) > 0 || l.figures.redis_unix_socket === true || l.figures.pacing_experiment === true || l.figures.env_experiment !== undefined;

type Row = [claim: string, goal: string, cadre: string, baseline: string, ratio: string, runs: string];
const rows: Row[] = [];
const runsOf = (bench: string) => lines.filter((l) => l.bench === bench && !experiment(l));
const loadOf = (ls: HistoryLine[]): string => range(ls.flatMap((l) => [l.load_start.loadavg[0], l.load_end.loadavg[0]]), 1);
/** Every value of a summary array across runs. */
const all = (ls: HistoryLine[], key: string): number[] => ls.flatMap((l) => ((l.figures.summary as Record<string, number[]> | undefined)?.[key] ?? []).filter((x) => x !== null && Number.isFinite(x)));
/** min–max, and the median when there are enough samples for it to say something. */
const r = (xs: number[], digits = 1): string => {
  if (!xs.length) return '-';
  const m = Math.round(median(xs) * 10 ** digits) / 10 ** digits;
  return xs.length >= 3 && Math.min(...xs) !== Math.max(...xs) ? `${range(xs, digits)} (med ${m})` : range(xs, digits);
};
const runsText = (ls: HistoryLine[]): string => `${ls.length} (load ${loadOf(ls)})`;

const hb = runsOf('heartbeat');
if (hb.length) {
  rows.push(['heartbeats/s, 200 agents, closed loop', '≥ 0.5× route', r(all(hb, 'cadre_per_s'), 0), `fixed-JSON route ${r(all(hb, 'fixed_json_per_s'), 0)}`, `×${r(all(hb, 'throughput_ratio'), 2)}`, runsText(hb)]);
  rows.push(['heartbeat p99 at half the gateway\'s throughput (ms)', '≤ 2× route', r(all(hb, 'cadre_p99_ms')), `route ${r(all(hb, 'fixed_json_p99_ms'))}`, `×${r(all(hb, 'p99_ratio'))}`, runsText(hb)]);
  // The route making one Redis round trip per request (route+redis): splits the p99 gap into the machine's and Cadre's.
  const split = hb.filter((l) => all([l], 'route_redis_p99_ms').length > 0);
  if (split.length) {
    rows.push(['heartbeats/s: route + one EVALSHA (split)', 'explains', r(all(split, 'route_redis_per_s'), 0), `cadre/route+redis ×${r(all(split, 'throughput_ratio_cadre_route_redis'), 2)}`, `route+redis/route ×${r(all(split, 'throughput_ratio_route_redis_route'), 2)}`, runsText(split)]);
    rows.push(['heartbeat p99: route + one EVALSHA (split, ms)', 'explains', r(all(split, 'route_redis_p99_ms')), `cadre/route+redis ×${r(all(split, 'p99_ratio_cadre_route_redis'))}`, `route+redis/route ×${r(all(split, 'p99_ratio_route_redis_route'))}`, runsText(split)]);
  }
  rows.push(['stop-all of 1,000 active runs (ms)', '< 1,000', r(hb.map((l) => (l.figures.stop_all as { ms: number }).ms)), '-', '-', runsText(hb)]);
}
const oh = runsOf('overhead');
if (oh.length) {
  const ratio = (a: string, b: string): number[] => oh.flatMap((l) => {
    const s = l.figures.summary as Record<string, number[]>;
    return s[a]!.map((x, i) => x / s[b]![i]!);
  });
  rows.push(['Node CPU per task (ms): gateway+worker | raw worker+client', 'report, cut', r(all(oh, 'cadre_node_cpu_ms_per_task')), `raw BullMQ flow ${r(all(oh, 'raw_node_cpu_ms_per_task'))}`, `×${r(ratio('cadre_node_cpu_ms_per_task', 'raw_node_cpu_ms_per_task'))}`, runsText(oh)]);
  rows.push(['Redis commands per task', 'report, cut', r(all(oh, 'cadre_commands_per_task'), 0), `raw ${r(all(oh, 'raw_commands_per_task'), 0)}`, `×${r(ratio('cadre_commands_per_task', 'raw_commands_per_task'))}`, runsText(oh)]);
  rows.push(['submit mean (ms): POST /api/tasks | flow.add', 'report, cut', r(all(oh, 'cadre_submit_mean_ms')), `flow.add ${r(all(oh, 'raw_submit_mean_ms'))}`, `×${r(ratio('cadre_submit_mean_ms', 'raw_submit_mean_ms'))}`, runsText(oh)]);
  rows.push(['submit p99 (ms)', 'report', r(all(oh, 'cadre_submit_p99_ms')), `flow.add ${r(all(oh, 'raw_submit_p99_ms'))}`, '-', runsText(oh)]);
  rows.push(['one-worker tasks/s', '≥ 0.5× raw', r(all(oh, 'cadre_tasks_per_s')), `raw ${r(all(oh, 'raw_tasks_per_s'))}`, `×${r(all(oh, 'throughput_ratio'), 2)}`, runsText(oh)]);
}
const sb = runsOf('submit');
if (sb.length) {
  rows.push(['gateway CPU per POST /api/tasks (ms), alone, 1 | 8 in flight', 'report, cut', `${r(all(sb, 'post_1_gateway_cpu_ms'), 2)} | ${r(all(sb, 'post_8_gateway_cpu_ms'), 2)}`, `GET of a task ${r(all(sb, 'get_1_gateway_cpu_ms'), 2)}; refused POST ${r(all(sb, 'refused_1_gateway_cpu_ms'), 2)}; /healthz ${r(all(sb, 'healthz_1_gateway_cpu_ms'), 2)}`, '-', runsText(sb)]);
  rows.push(['Redis commands per POST /api/tasks (scripts\' own included)', 'report, cut', r(all(sb, 'post_1_redis_commands'), 0), '-', '-', runsText(sb)]);
}
const fo = runsOf('fanout');
if (fo.length) {
  rows.push(['fan-out deliveries per serving CPU-second, 100 × 200 ev/s', '≥ 0.7× ceiling', r(all(fo, 'cadre_deliveries_per_cpu_s'), 0), `bare grpc-js broadcaster ${r(all(fo, 'ceiling_deliveries_per_cpu_s'), 0)}`, `×${r(all(fo, 'efficiency_ratio'), 2)}`, runsText(fo)]);
  rows.push(['fan-out p99, 100 watchers × 200 ev/s, own process (ms)', '≤ 10', r(all(fo, 'cadre_p99_ms')), `ceiling ${r(all(fo, 'ceiling_p99_ms'))}; raw XREAD ${r(all(fo, 'raw_xread_p99_ms'))}`, '-', runsText(fo)]);
  rows.push(['stream reads per event, 100 watchers', 'no growth', r(all(fo, 'cadre_reads_per_event'), 2), `raw XREAD ${r(all(fo, 'raw_reads_per_event'))}`, '-', runsText(fo)]);
}
const ca = runsOf('cancel');
if (ca.length) {
  const both = (k: 'p50_ms' | 'p99_ms' | 'max_ms'): number[] => ca.map((l) => (l.figures.both as Record<string, number>)[k]!);
  rows.push(['cancel → tool and model jobs out of active (ms), p50 | p99', '< 1,000', `${r(both('p50_ms'))} | ${r(both('p99_ms'))}`, '-', '-', runsText(ca)]);
}
const me = runsOf('memory');
if (me.length) {
  const f = (k: (x: Record<string, unknown>) => number): number[] => me.map((l) => k(l.figures));
  rows.push(['gateway RSS holding 1,000 WatchTeam streams (MB)', '< 256', r(f((x) => x.rss_holding_mb as number)), '-', '-', runsText(me)]);
  rows.push(['stalled-watcher burst: peak RSS (MB)', '< 256', r(f((x) => (x.stalled as { rss_peak_mb: number }).rss_peak_mb)), `unbounded buffer +${r(f((x) => (x.burst as { unbounded_buffer_mb: number }).unbounded_buffer_mb))}`, '-', runsText(me)]);
  rows.push(['peak RSS over the whole memory bench (VmHWM, MB)', '< 256', r(f((x) => x.peak_rss_mb as number)), '-', '-', runsText(me)]);
}
const ap = runsOf('approvals');
if (ap.length) {
  const f = (k: (x: Record<string, unknown>) => number): number[] => ap.map((l) => k(l.figures));
  const pending = [...new Set(f((x) => x.pending as number))].join(', ');
  rows.push([`active jobs with ${pending} approvals pending, concurrency 4`, '0', r(f((x) => x.active_jobs_pending as number), 0), '-', '-', runsText(ap)]);
  rows.push(['new task POST → worker_started while they wait (ms)', 'at once', r(f((x) => x.task_start_ms as number), 0), '-', '-', runsText(ap)]);
  rows.push(['decision → tool run (ms), p50 | p99', 'report', `${r(f((x) => (x.decision_to_tool as { p50_ms: number }).p50_ms))} | ${r(f((x) => (x.decision_to_tool as { p99_ms: number }).p99_ms))}`, '-', '-', runsText(ap)]);
  rows.push(['Redis bytes per pending approval: whole parked task | record + transcript', 'report', `${r(f((x) => x.redis_bytes_per_parked_task as number), 0)} | ${r(f((x) => x.redis_bytes_approval_keys as number), 0)}`, '-', '-', runsText(ap)]);
}
const pk = runsOf('parking');
if (pk.length) {
  const f = (k: (x: Record<string, unknown>) => number): number[] => pk.map((l) => k(l.figures));
  const parked = [...new Set(f((x) => x.parked as number))].join(', ');
  rows.push([`active jobs with ${parked} sessions parked on client tools, concurrency 4`, '0', r(f((x) => x.active_jobs_parked as number), 0), '-', '-', runsText(pk)]);
  rows.push(['new task POST → worker_started while they park (ms)', 'at once', r(f((x) => x.task_start_ms as number), 0), '-', '-', runsText(pk)]);
  rows.push(['ToolResult → next model call (ms), p50 | p99', 'report', `${r(f((x) => (x.resume as { p50_ms: number }).p50_ms))} | ${r(f((x) => (x.resume as { p99_ms: number }).p99_ms))}`, '-', '-', runsText(pk)]);
  rows.push(['Redis bytes per parked session', 'report', r(f((x) => x.redis_bytes_per_parked_session as number), 0), '-', '-', runsText(pk)]);
}
// StreamSession vs the same model stream read with `openai`: what Cadre adds, per round (the raw side's own figure beside).
const st = runsOf('streaming');
if (st.length) {
  type Added = { first_p50: number; lag_p99: number; relay_p99: number };
  // Runs before the spread level existed have no `arrivals`: theirs were all bursts.
  // Relay lag came later than the first runs of this version: a sample without it has none to give.
  type StreamSample = { sessions: number; arrivals?: 'burst' | 'spread'; side: string; first_delta: { p50_ms: number }; relay_lag?: { p99_ms: number } };
  const levels = [
    { key: '1', sessions: 1, arrivals: 'burst', text: '1 session' },
    { key: '100', sessions: 100, arrivals: 'burst', text: '100 sessions sent at once' },
    { key: '100_spread', sessions: 100, arrivals: 'spread', text: '100 sessions, arrivals spread' },
  ] as const;
  const within = (xs: number[], goal: number): string => `≤ ${goal} in ${xs.filter((x) => x <= goal).length} of ${xs.length} rounds`;
  for (const level of levels) {
    const added = (k: keyof Added): number[] => st.flatMap((l) => ((l.figures.added as Record<string, Added[]>)[`at_${level.key}`] ?? []).map((a) => a[k]));
    const raw = (k: (s: StreamSample) => number | undefined): number[] => st.flatMap((l) => (l.figures.samples as StreamSample[]).filter((s) => s.sessions === level.sessions && (s.arrivals ?? 'burst') === level.arrivals && s.side === 'raw').flatMap((s) => k(s) ?? []));
    const first = added('first_p50');
    const relay = added('relay_p99');
    if (!first.length) continue;
    const at100 = level.sessions === 100;
    rows.push([`StreamSession first text delta, ${level.text}: added at p50 (ms)`, '≤ +5', r(first), `openai p50 ${r(raw((s) => s.first_delta.p50_ms))}`, within(first, 5), runsText(st)]);
    rows.push([`per-delta relay lag p99, ${level.text}: added (ms)`, at100 ? '≤ +10' : 'report', r(relay), `openai p99 ${r(raw((s) => s.relay_lag?.p99_ms))}`, at100 ? within(relay, 10) : '-', runsText(st)]);
    rows.push([`per-chunk lag p99 from the send, ${level.text}: added (ms)`, 'report', r(added('lag_p99')), '-', '-', runsText(st)]);
  }
}
printTable(`Ranges over every sample of every run of bench version ${BENCH_VERSION}${SINCE === undefined ? "" : ` measured since ${new Date(SINCE).toISOString()}`} (${new Set(lines.map((l) => l.run_id)).size} run ids in ${HISTORY_FILE})`, [
  ['claim', 'goal', 'cadre', 'baseline', 'ratio', 'runs (1-min load)'] as Cell[], ...rows,
]);
const byCommit = new Map<string, Set<string>>();
for (const l of lines.filter((x) => !experiment(x))) byCommit.set(l.commit ?? 'before commits were recorded', (byCommit.get(l.commit ?? 'before commits were recorded') ?? new Set()).add(l.run_id));
console.log(`\ncommits measured: ${[...byCommit.entries()].map(([c, ids]) => `${c} (${ids.size} runs)`).join(', ')}`);
