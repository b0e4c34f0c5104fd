// One flat config for the whole workspace: typescript-eslint's recommended rules, plus the few that catch
// real bugs in async, stream-heavy code.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/node_modules/**', 'libs/protocol/src/gen/**', '.cadre/**', '.nx/**', 'coverage/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommended,
  {
    languageOptions: { globals: { process: 'readonly', console: 'readonly', setTimeout: 'readonly', clearTimeout: 'readonly', setImmediate: 'readonly', URL: 'readonly', AbortController: 'readonly', AbortSignal: 'readonly', Buffer: 'readonly', performance: 'readonly', structuredClone: 'readonly', TextEncoder: 'readonly', TextDecoder: 'readonly', fetch: 'readonly', queueMicrotask: 'readonly', setInterval: 'readonly', clearInterval: 'readonly' } },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-constant-condition': ['error', { checkLoops: false }],
    },
  },
  // Tests read JSON responses of many shapes; typing each one adds noise, not safety.
  { files: ['**/*.test.ts'], rules: { '@typescript-eslint/no-explicit-any': 'off' } },
);
