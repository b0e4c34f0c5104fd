// A tiny element builder: h('button', { onclick, 'aria-label': 'Pause run x' }, 'Pause'). Text is always set as
// text (never HTML), so goals, results and event payloads cannot inject markup.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'class') el.className = value;
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, String(value));
  }
  el.append(...nodes(children));
  return el;
}

/** el.replaceChildren with h's rules: nested arrays flattened, null/undefined/false skipped (the DOM would show "null"). */
export function fill(el, ...children) {
  el.replaceChildren(...nodes(children));
}

const nodes = (children) =>
  children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false).map((c) => (c instanceof Node ? c : String(c)));

export function say(message) {
  const status = document.getElementById('status');
  status.textContent = message;
  status.classList.toggle('shown', Boolean(message));
}

// Durations are formatted where the CLI finds them too.
export { duration } from './team.js';

export const short = (id) => (id ? String(id).slice(0, 8) : '—');
export const orDash = (v) => (v === null || v === undefined || v === '' ? '—' : v);
