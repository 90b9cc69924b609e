// The dashboard's shared pieces: the HTTP JSON API (api: a 401 hands over
// to the login view that app.js registers), DOM and formatting helpers, and
// the page's fixed elements.

export const POLL_MS = 2000;
export const CHART_MIN_INTERVAL_MS = 250;  // at most ~4 chart redraws a second
export const TERMINAL_JOB = new Set(['SUCCEEDED', 'FAILED', 'CANCELLED']);
export const PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b',
                 '#e377c2', '#7f7f7f', '#bcbd22', '#393b79', '#637939', '#843c39', '#7b4173'];

export const main = document.getElementById('main');
export const announcer = document.querySelector('[data-testid="announcer"]');
export const userBadge = document.querySelector('[data-testid="session-user"]');
export const logoutButton = document.querySelector('[data-testid="logout"]');
export const serverInfo = document.querySelector('[data-testid="server-info"]');

export class AuthError extends Error {}


// ---------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------

export async function api(path, options = {}) {
  const response = await fetch(path, {
    credentials: 'same-origin',
    headers: {Accept: 'application/json', ...(options.body ? {'Content-Type': 'application/json'} : {})},
    ...options,
  });
  if (response.status === 401) {
    unauthorized();
    throw new AuthError('not logged in');
  }
  if (response.status === 204) return null;
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    if (response.ok) throw new Error(`${path}: not JSON`);
  }
  if (!response.ok) {
    const message = body && body.error ? body.error.message : `${response.status} ${response.statusText}`;
    const error = new Error(message);
    error.status = response.status;
    throw error;
  }
  return body;
}

// ---------------------------------------------------------------------------
// Small DOM helpers
// ---------------------------------------------------------------------------

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') el.className = value;
    else if (key === 'testid') el.dataset.testid = value;
    else if (key.startsWith('on')) el.addEventListener(key.slice(2), value);
    else if (key === 'text') el.textContent = value;
    else el.setAttribute(key, value === true ? '' : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function announce(text) {
  announcer.textContent = text;
}

export function fmtNumber(x, digits = 4) {
  if (x === undefined || x === null || x === '') return '–';
  x = Number(x);
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? '∞' : '−∞';
  if (x === 0) return '0';
  const a = Math.abs(x);
  if (a >= 1e5 || a < 1e-3) return x.toExponential(2);
  return x.toFixed(digits);
}

export function fmtTime(ts) {
  if (!ts) return '–';
  const d = new Date(ts);
  if (Number.isNaN(d.getTime()) || d.getTime() <= 0) return '–';
  return d.toLocaleString(undefined, {year: 'numeric', month: 'short', day: '2-digit',
                                      hour: '2-digit', minute: '2-digit', second: '2-digit'});
}

export function fmtBytes(n) {
  n = Number(n || 0);
  if (n <= 0) return '0 B';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; ++i; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function stateBadge(state, testid) {
  const s = state || 'STATE_UNSPECIFIED';
  return h('span', {class: `state state-${s.toLowerCase()}`, testid}, s);
}

export function humanEnum(s) {
  return (s || '').toLowerCase().replace(/_/g, ' ');
}

// "val.accuracy (max)" -> "accuracy".
export function selectionMetric(selection) {
  if (!selection) return null;
  const m = /^\s*(?:val\.)?([^\s(]+)/.exec(selection);
  return m ? m[1] : null;
}

export function summaryOf(result, key) {
  if (!result || !result.val || !key) return null;
  return result.val[key] || result.val[`val.${key}`] || null;
}

export function fmtMeanStd(summary) {
  if (!summary) return '–';
  return `${fmtNumber(summary.mean)} ± ${fmtNumber(summary.std)}`;
}

export function progressOf(job) {
  let done = 0;
  let total = 0;
  for (const t of job.tasks || []) {
    total += t.epochsTotal || 0;
    done += t.state === 'SUCCEEDED' ? (t.epochsTotal || t.epochsDone || 0) : (t.epochsDone || 0);
  }
  return {done: Math.min(done, total || done), total};
}

export function progressBar(job, testid) {
  const {done, total} = progressOf(job);
  const pct = total ? Math.round((100 * done) / total) : 0;
  return h('span', {class: 'progress', testid},
           h('progress', {max: total || 1, value: done, 'aria-label': `${done} of ${total} epochs`}),
           h('span', {class: 'progress-text'}, total ? `${done}/${total} (${pct}%)` : '–'));
}

export function waitReasons(job) {
  const reasons = new Map();
  for (const t of job.tasks || []) {
    // Queued in traind, or (launcher: slurm) started but waiting in Slurm's queue.
    if ((t.state !== 'QUEUED' && !t.waitDetail) || !t.waitReason || t.waitReason === 'WAIT_REASON_UNSPECIFIED') continue;
    reasons.set(t.waitReason, (reasons.get(t.waitReason) || 0) + 1);
  }
  return [...reasons].map(([r, n]) => `${humanEnum(r)}${n > 1 ? ` ×${n}` : ''}`).join(', ');
}

export function failureText(f) {
  if (!f || (!f.reason && !f.message)) return '';
  const parts = [f.reason && f.reason !== 'REASON_UNSPECIFIED' ? f.reason : ''];
  if (f.message) parts.push(f.message);
  if (f.exitCode) parts.push(`exit code ${f.exitCode}`);
  if (f.signal) parts.push(`signal ${f.signal}`);
  return parts.filter(Boolean).join(': ');
}

// Called on any 401 (app.js shows the login view and drops every job datum).
let unauthorized = () => {};
export function onUnauthorized(handler) {
  unauthorized = handler;
}

export function setMain(...children) {
  main.replaceChildren(...children);
}
