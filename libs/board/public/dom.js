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

/** "3s", "4m 05s", "2h 10m" */
export function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${String(s % 60).padStart(2, '0')}s`;
  return `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m`;
}

export const short = (id) => (id ? String(id).slice(0, 8) : '—');
export const orDash = (v) => (v === null || v === undefined || v === '' ? '—' : v);
