// One flat config for the whole workspace: typescript-eslint's recommended rules, the type-aware promise rules
// that catch real bugs in async, stream-heavy code (a floating promise hides its rejection; an async callback
// where a void one is expected drops its errors), and the layer boundaries of STYLE.md.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

/** Package boundaries every app and lib keeps (see the layer-boundaries block below). */
const PACKAGE_BOUNDARIES = [
  { group: ['**/apps/**', '**/libs/**', '**/tests/**', '**/bench/**'], message: 'Import another package by its name (@cadre/...), never by a relative path into its folder.' },
  { group: ['@cadre/*/**'], message: 'Import a package through its public surface (@cadre/<name>), not a file inside it.' },
  { group: ['@cadre/gateway', '@cadre/worker', '@cadre/vm-agent', '@cadre/stack', '@cadre/cli'], message: 'Apps are composition roots: nothing imports them.' },
];

/** Redis data commands (ioredis method names) that only libs/store sends. */
const REDIS_DATA_COMMANDS = ['hget', 'hmget', 'hgetall', 'hset', 'hdel', 'hincrby', 'xadd', 'xrange', 'xrevrange', 'xread', 'zadd', 'zrange', 'zrangebyscore', 'zrem', 'lrange', 'lpush', 'rpush', 'sadd', 'srem', 'smembers', 'evalsha'];

/** What only libs/store does (see the Redis block below). */
const STORE_ONLY = [
  { selector: `CallExpression[callee.property.name=/^(${REDIS_DATA_COMMANDS.join('|')})$/]`, message: 'Redis commands belong in libs/store: give the store a method.' },
  { selector: "CallExpression > MemberExpression.callee > MemberExpression.object[property.name='redis'][object.type!='ThisExpression']", message: "Do not reach into a store's connection: give the store a method." },
];

export default tseslint.config(
  { ignores: ['**/node_modules/**', 'libs/protocol/src/gen/**', '.cadre/**', '.nx/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
      globals: { process: 'readonly', console: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', setImmediate: 'readonly', URL: 'readonly', AbortController: 'readonly', AbortSignal: 'readonly', Buffer: 'readonly', performance: 'readonly', structuredClone: 'readonly', TextEncoder: 'readonly', TextDecoder: 'readonly', fetch: 'readonly', queueMicrotask: 'readonly', setInterval: 'readonly', clearInterval: 'readonly' },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  { files: ['**/*.js'], extends: [tseslint.configs.disableTypeChecked] },
  // The board runs in the browser (plain ES modules, no build step).
  {
    files: ['libs/board/public/**/*.js'],
    languageOptions: {
      globals: { window: 'readonly', document: 'readonly', location: 'readonly', sessionStorage: 'readonly', Node: 'readonly', FormData: 'readonly', URLSearchParams: 'readonly', TextDecoderStream: 'readonly', Event: 'readonly' },
    },
  },
  // Layer boundaries: a package is reached only through its public surface (its name, i.e. src/index.ts);
  // libs never import apps and apps never import each other. Tests and benches may wire apps together.
  {
    files: ['apps/*/src/**/*.ts', 'libs/*/src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: { 'no-restricted-imports': ['error', { patterns: PACKAGE_BOUNDARIES }] },
  },
  // The vm-agent runs on the VM and talks to the gateway over HTTP only: it shares the runs contract
  // (@cadre/protocol), never the store or the session engine behind the gateway.
  {
    files: ['apps/vm-agent/src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          ...PACKAGE_BOUNDARIES,
          { group: ['@cadre/store', '@cadre/session'], message: 'The vm-agent reaches the gateway over HTTP; shared run types live in @cadre/protocol.' },
        ],
      }],
    },
  },
  // The gateway's services sit behind both edges (HTTP and gRPC): they take domain types, never an edge's.
  {
    files: ['apps/gateway/src/{tasks,runs,approvals}/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          ...PACKAGE_BOUNDARIES,
          { group: ['**/http/**', '**/grpc/**', '**/ws/**'], message: 'A service takes domain types; an edge translates its wire form before calling it.' },
        ],
      }],
    },
  },
  // Redis commands live in libs/store (keys from keys.ts, scripts in lua/): an app asks the store, which gets a
  // method for what the app needs, instead of reading a hash field or a store's connection itself.
  {
    files: ['apps/*/src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: { 'no-restricted-syntax': ['error', ...STORE_ONLY] },
  },
  // A coded error is built by its own constructor, so its code is always set.
  {
    files: ['libs/*/src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-syntax': ['error', { selector: "TSAsExpression[expression.type='NewExpression'][typeAnnotation.typeName.name=/Error$/]", message: 'Construct the typed error (new StoreError(code, message)); do not cast an Error to it.' }],
    },
  },
  // Routes take their request types from their schemas (RoutesPlugin's type provider): a hand-written
  // `app.post<{ Body: ... }>` would sit beside the schema and drift from it.
  {
    files: ['apps/gateway/src/http/routes/**/*.ts'],
    rules: {
      'no-restricted-syntax': ['error', ...STORE_ONLY,
        { selector: "CallExpression[callee.property.name=/^(get|post|put|patch|delete|route)$/][typeArguments]", message: 'Derive request types from the route schema (RoutesPlugin); no hand-written route generics.' },
      ],
    },
  },
  // Tests read JSON responses of many shapes; typing each one adds noise, not safety.
  { files: ['**/*.test.ts'], rules: { '@typescript-eslint/no-explicit-any': 'off' } },
);
