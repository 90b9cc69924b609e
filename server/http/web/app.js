// The traind web dashboard: the job list and a live job page, read-only.
// Talks to traind's HTTP JSON API (/api/v1/...), which maps the messages of
// proto/traind/v1 to protobuf's JSON (lowerCamelCase, enums by name, int64
// as strings). Any 401 shows the login view and drops every job datum.

import {DatasetListView, DatasetView} from './datasets_page.js';
import {JobListView} from './job_list.js';
import {JobView} from './job_page.js';
import {api, h, logoutButton, main, onUnauthorized, serverInfo, setMain, userBadge} from './dom.js';

// What the current view runs (timers, streams, charts); stopped on leaving it.
let view = null;
let session = null;


function leaveView() {
  if (view) view.stop();
  view = null;
}


function showLogin(message) {
  leaveView();
  session = null;
  userBadge.hidden = true;
  userBadge.textContent = '';
  logoutButton.hidden = true;
  serverInfo.textContent = '';
  document.title = 'traind — log in';
  const error = h('p', {class: 'error', role: 'alert', testid: 'login-error'});
  error.hidden = !message;
  if (message) error.textContent = message;
  const input = h('input', {id: 'token', name: 'token', type: 'password', autocomplete: 'off',
                            spellcheck: 'false', required: true, testid: 'login-token',
                            'aria-describedby': 'login-hint'});
  const form = h('form', {class: 'login-form', testid: 'login-form'},
                 h('label', {for: 'token'}, 'Bearer token'),
                 input,
                 h('button', {type: 'submit', testid: 'login-submit'}, 'Log in'));
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    error.hidden = true;
    try {
      const r = await fetch('/api/v1/session', {
        method: 'POST', credentials: 'same-origin',
        headers: {'Content-Type': 'application/json', Accept: 'application/json'},
        body: JSON.stringify({token: input.value.trim()}),
      });
      if (r.status === 401) throw new Error('That token is not valid.');
      if (!r.ok) throw new Error(`Login failed: ${r.status} ${r.statusText}`);
      input.value = '';
      await start();
    } catch (e) {
      error.textContent = e.message;
      error.hidden = false;
      input.focus();
    }
  });
  setMain(h('section', {class: 'login', testid: 'login-view', 'aria-labelledby': 'login-title'},
            h('h1', {id: 'login-title'}, 'Log in to traind'),
            error,
            form,
            h('p', {id: 'login-hint', class: 'hint', testid: 'login-hint'},
              'Or run ', h('code', {}, 'trainctl dashboard'),
              ' on the server for a one-time link.')));
  input.focus();
}

function route() {
  if (!session) return;
  leaveView();
  const hash = location.hash || '#/';
  const m = /^#\/jobs\/([^/?#]+)/.exec(hash);
  const d = /^#\/datasets\/([^/?#]+)(?:\?owner=([^&#]*))?/.exec(hash);
  if (m) {
    view = new JobView(decodeURIComponent(m[1]));
  } else if (d) {
    view = new DatasetView(decodeURIComponent(d[1]), d[2] ? decodeURIComponent(d[2]) : '');
  } else if (/^#\/datasets\/?$/.test(hash)) {
    view = new DatasetListView();
  } else {
    view = new JobListView();
  }
  view.start();
  main.focus({preventScroll: true});
}

async function start() {
  let s;
  try {
    const r = await fetch('/api/v1/session', {credentials: 'same-origin', headers: {Accept: 'application/json'}});
    if (r.status === 401) {
      const expired = new URLSearchParams(location.search).get('login') === 'expired';
      showLogin(expired ? 'That login link has expired or was already used. Ask for a new one.' : '');
      return;
    }
    if (!r.ok) throw new Error(`${r.status} ${r.statusText}`);
    s = await r.json();
  } catch (e) {
    setMain(h('p', {class: 'error', role: 'alert', testid: 'fatal-error'}, `traind is unreachable: ${e.message}`));
    setTimeout(start, 5000);
    return;
  }
  session = s;
  if (location.search) history.replaceState(null, '', location.pathname + location.hash);
  userBadge.textContent = `${s.name} (${s.role})`;
  userBadge.hidden = false;
  logoutButton.hidden = false;
  api('/api/v1/info').then((info) => {
    if (session) serverInfo.textContent = `traind ${info.version}`;
  }).catch(() => {});
  route();
}

logoutButton.addEventListener('click', async () => {
  try {
    await fetch('/api/v1/session/logout', {method: 'POST', credentials: 'same-origin'});
  } finally {
    showLogin();
  }
});
window.addEventListener('hashchange', route);
onUnauthorized(showLogin);

// For tests and the curious: the live charts of the open job page.
window.traindDashboard = {
  charts: () => (view instanceof JobView ? Object.fromEntries([...view.charts].map(([k, c]) => [k, c.g])) : {}),
};

start();
