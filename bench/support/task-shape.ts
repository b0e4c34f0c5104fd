// The one-worker task overhead.bench.ts runs through Cadre and as a raw BullMQ flow: same goal, same worker.
export const GOAL = 'Summarise the release notes';
export const INSTRUCTIONS = 'List the three most important changes.';
export const RAW_QUEUE = 'raw-agents';
