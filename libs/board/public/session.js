// The signed-in keys live in this tab's sessionStorage only: never in a URL, a cookie or localStorage.
const KEYS = 'cadre.keys';
const WORKSPACE = 'cadre.workspace';

/** @returns {{ apiKey: string, runsKey: string, controlKey: string } | null} */
export function keys() {
  const raw = sessionStorage.getItem(KEYS);
  return raw ? JSON.parse(raw) : null;
}

export function signIn(apiKey, runsKey, controlKey) {
  sessionStorage.setItem(KEYS, JSON.stringify({ apiKey, runsKey, controlKey }));
}

export function signOut() {
  sessionStorage.clear();
}

export function workspace() {
  return sessionStorage.getItem(WORKSPACE) || 'default';
}

export function setWorkspace(ws) {
  sessionStorage.setItem(WORKSPACE, ws);
}
