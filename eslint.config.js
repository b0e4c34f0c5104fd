// One flat config for the whole workspace: typescript-eslint's recommended rules, the type-aware promise rules
// that catch real bugs in async, stream-heavy code (a floating promise hides its rejection; an async callback
// where a void one is expected drops its errors), and the layer boundaries of STYLE.md.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

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
    rules: {
      'no-restricted-imports': ['error', {
        patterns: [
          { group: ['**/apps/**', '**/libs/**', '**/tests/**', '**/bench/**'], message: 'Import another package by its name (@cadre/...), never by a relative path into its folder.' },
          { group: ['@cadre/*/**'], message: 'Import a package through its public surface (@cadre/<name>), not a file inside it.' },
          { group: ['@cadre/gateway', '@cadre/worker', '@cadre/vm-agent', '@cadre/stack', '@cadre/cli'], message: 'Apps are composition roots: nothing imports them.' },
        ],
      }],
    },
  },
  // Tests read JSON responses of many shapes; typing each one adds noise, not safety.
  { files: ['**/*.test.ts'], rules: { '@typescript-eslint/no-explicit-any': 'off' } },
);
