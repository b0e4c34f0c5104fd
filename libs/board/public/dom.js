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
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

export function say(message) {
  const status = document.getElementById('status');
  status.textContent = message;
  status.classList.toggle('shown', Boolean(message));
}

// Durations are formatted where the CLI finds them too.
export { duration } from './team.js';

export const short = (id) => (id ? String(id).slice(0, 8) : '—');
export const orDash = (v) => (v === null || v === undefined || v === '' ? '—' : v);
