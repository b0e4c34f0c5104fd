// What `npm start` prints once the gateway is ready: where everything is, and one example of each way in.
import { redactUrl } from '@cadre/config';

export interface BannerInfo {
  port: number;
  host: string;
  /** The key itself when the stack generated it; undefined when it came from CADRE_API_KEY (not echoed). */
  devApiKey: string | undefined;
  devApiKeyFile: string;
  /** `shown`: the embedded server's URL, or the configured Redis as describeRedisTarget shows it (no password). */
  redis: { shown: string; embedded: { pid: number; dataDir: string } | undefined };
  model: { url: string; scripted: boolean };
  workers: number;
  workerConcurrency: number;
  vmAgents: number;
  /** The runs API's key (x-windie-runs-key) when the stack generated it; undefined when from RUNS_API_KEY. */
  devRunsKey: string | undefined;
  devRunsKeyFile: string;
  /** The stop-all key (x-windie-runs-control-key) when the stack generated it; undefined when from RUNS_CONTROL_API_KEY. */
  devRunsControlKey: string | undefined;
  devRunsControlKeyFile: string;
  dataDir: string;
}

// [[scripted:delay=3000]]: the scripted model takes 3 s per answer, so the task runs for ~7 s and the watch
// commands below show its events arriving live (without it the task ends in ~100 ms and a watch only replays).
const TASK_BODY =
  '{"workspace_id":"demo","goal":"Weigh two options [[scripted:delay=3000]]","team":{"workers":[{"role":"researcher","instructions":"List the pros."},{"role":"critic","instructions":"List the cons."}]}}';
const SLOW_TASK_BODY = '{"workspace_id":"demo","goal":"Take your time [[scripted:delay=30000]]"}';

const RUN_BODY =
  '{"workspace_id":"default","agent_id":"demo","query":"Say hello [[scripted:call=shell({\\"command\\":\\"echo hello from the VM\\"})]]"}';

/** How a local client reaches a server bound to `host`. */
export function clientHost(host: string): string {
  if (host === '127.0.0.1' || host === '0.0.0.0' || host === '::' || host === 'localhost' || host === '::1') return 'localhost';
  return host.includes(':') ? `[${host}]` : host;
}

export function renderBanner(info: BannerInfo): string {
  const target = `${clientHost(info.host)}:${info.port}`;
  const base = `http://${target}`;
  const auth = `-H "authorization: Bearer $KEY"`;
  const reach =
    info.host === '127.0.0.1' || info.host === 'localhost' || info.host === '::1'
      ? `listening on ${info.host} only, the dev default; set HOST=0.0.0.0 to accept other machines`
      : `listening on ${info.host}`;
  const key =
    info.devApiKey !== undefined
      ? `${info.devApiKey}  (dev key, kept in ${info.devApiKeyFile}; set CADRE_API_KEY to use your own)`
      : 'from CADRE_API_KEY (not shown)';
  const redis = info.redis.embedded
    ? `${info.redis.shown}  (private redis-server, pid ${info.redis.embedded.pid}, data in ${info.redis.embedded.dataDir})`
    : `${info.redis.shown}  (configured)`;
  const model = info.model.scripted
    ? `scripted model at ${info.model.url}  (set OPENAI_BASE_URL and OPENAI_API_KEY to use a real one)`
    : `${redactUrl(info.model.url)}  (from OPENAI_BASE_URL)`;
  const exportKey = info.devApiKey !== undefined ? `export KEY=${info.devApiKey}` : 'export KEY="$CADRE_API_KEY"';
  return [
    '',
    '  Cadre is up.',
    '',
    `  Board         ${base}/   (open it in a browser; sign in with the API key below)`,
    `  CLI           npx cadre status   (finds this stack and its dev keys under ${info.dataDir})`,
    `  HTTP API      ${base}   (${reach})`,
    `  gRPC target   ${target}   (plaintext HTTP/2, same port; roz.v1.AgentService, kontekst.AgentService and DaemonService, reflection on)`,
    `  API key       ${key}`,
    `  Redis         ${redis}`,
    `  Model         ${model}`,
    `  Workers       ${info.workers} process${info.workers === 1 ? '' : 'es'} x ${info.workerConcurrency} concurrent jobs  (WORKERS, WORKER_CONCURRENCY)`,
    `  VM agents     ${info.vmAgents} serving workspace "default"  (VM_AGENTS=0 turns them off)`,
    `  Runs key      ${info.devRunsKey !== undefined ? `${info.devRunsKey}  (x-windie-runs-key; dev key, kept in ${info.devRunsKeyFile})` : 'from RUNS_API_KEY (not shown)'}`,
    `  Control key   ${info.devRunsControlKey !== undefined ? `${info.devRunsControlKey}  (x-windie-runs-control-key, for stop-all; dev key, kept in ${info.devRunsControlKeyFile})` : 'from RUNS_CONTROL_API_KEY (not shown)'}`,
    `  Data          ${info.dataDir}`,
    '',
    '  Try it (bash, from the repository; the create call keeps the new task id in $TASK; the task runs ~7 s, watch it live):',
    '',
    `    ${exportKey}`,
    `    ${info.devRunsKey !== undefined ? `export RUNS_KEY=${info.devRunsKey}` : 'export RUNS_KEY="$RUNS_API_KEY"'}`,
    `    TASK=$(curl -s -XPOST ${base}/api/tasks ${auth} -H 'content-type: application/json' \\`,
    `      -d '${TASK_BODY}' | tee /dev/stderr | grep -o '"task_id":"[^"]*"' | cut -d'"' -f4); echo`,
    `    curl -N ${base}/api/tasks/$TASK/stream ${auth}`,
    `    npx buf curl --protocol grpc --http2-prior-knowledge --emit-defaults ${auth} \\`,
    `      -d "{\\"task_id\\":\\"$TASK\\"}" ${base}/roz.v1.AgentService/WatchTeam`,
    `    npx cadre task list -w demo   # these tasks are in workspace "demo"; the CLI and the board open "default"`,
    `    curl -s "${base}/api/tasks/$TASK/events?after_seq=0&limit=200" ${auth}`,
    `    curl -s ${base}/api/tasks/$TASK ${auth}`,
    '',
    '  A cancel (a task that would take minutes; its stream ends with task_cancelled):',
    '',
    `    TASK=$(curl -s -XPOST ${base}/api/tasks ${auth} -H 'content-type: application/json' \\`,
    `      -d '${SLOW_TASK_BODY}' | grep -o '"task_id":"[^"]*"' | cut -d'"' -f4)`,
    `    curl -sN ${base}/api/tasks/$TASK/stream ${auth} | grep --line-buffered '^event:' &`,
    `    sleep 2; curl -s -XPOST ${base}/api/tasks/$TASK/cancel ${auth}; echo`,
    '',
    `  gRPC reflection: npx buf curl --protocol grpc --http2-prior-knowledge --list-methods ${base}`,
    '',
    '  A run for the VM agents (it runs a shell command in the agent\'s working directory; it waits in awaiting_worker',
    '  until an agent\'s next heartbeat, every RUNS_HEARTBEAT_INTERVAL_MS = 5 s by default):',
    '',
    `    RUN=$(curl -s -XPOST ${base}/api/runs/ -H "x-windie-runs-key: $RUNS_KEY" -H 'content-type: application/json' \\`,
    `      -d '${RUN_BODY}' | tee /dev/stderr | grep -o '"run_id":"[^"]*"' | head -1 | cut -d'"' -f4); echo`,
    `    curl -N ${base}/api/runs/$RUN/stream -H "x-windie-runs-key: $RUNS_KEY"`,
    `    curl -s -XPOST ${base}/api/runs/stop-all -H "x-windie-runs-control-key: ${info.devRunsControlKey ?? '$RUNS_CONTROL_API_KEY'}" -H 'content-type: application/json' -d '{"workspace_id":"default"}'`,
    '',
    '  Events: poll with after_seq = the last reply\'s next_after_seq; the stream and WatchTeam end after the task\'s last event.',
    '  Ctrl-C (or SIGTERM) stops everything; a second Ctrl-C kills at once.',
    '',
  ].join('\n');
}
