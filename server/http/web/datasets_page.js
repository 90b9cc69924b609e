// Datasets: the caller's stored datasets (an admin's: everyone's), and one
// dataset's profile and the jobs that trained on it. Read-only; uploads go
// through trainctl or the Python client.
import {AuthError, POLL_MS, api, fmtBytes, fmtNumber, fmtTime, h, humanEnum, setMain} from './dom.js';

const ref = (d) => `${d.name}:${d.version}`;
const short = (sha) => (sha || '').slice(0, 12);

export class DatasetListView {
  constructor() {
    this.timer = null;
    this.stopped = false;
  }

  start() {
    document.title = 'traind — datasets';
    this.tbody = h('tbody');
    this.status = h('p', {class: 'muted', testid: 'dataset-list-status'});
    setMain(h('section', {testid: 'dataset-list', 'aria-labelledby': 'datasets-title'},
              h('div', {class: 'title-row'}, h('h1', {id: 'datasets-title'}, 'Datasets')),
              h('div', {class: 'table-wrap'},
                h('table', {class: 'jobs', testid: 'datasets-table'},
                  h('thead', {}, h('tr', {},
                    ['Dataset', 'Owner', 'Size', 'SHA-256', 'File', 'Created']
                      .map((c) => h('th', {scope: 'col'}, c)))),
                  this.tbody)),
              h('p', {class: 'hint'}, 'Upload with ', h('code', {}, 'trainctl datasets upload FILE'),
                ' or the Python client’s ', h('code', {}, 'upload_dataset'), '.'),
              this.status));
    this.refresh();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  async refresh() {
    clearTimeout(this.timer);
    try {
      const r = await api('/api/v1/datasets');
      if (this.stopped) return;
      this.render(r.datasets || []);
      this.status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (e instanceof AuthError || this.stopped) return;
      this.status.textContent = `Could not load datasets: ${e.message}`;
    }
    if (!this.stopped) this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  render(datasets) {
    if (!datasets.length) {
      this.tbody.replaceChildren(h('tr', {}, h('td', {colspan: 6, class: 'muted', testid: 'no-datasets'},
                                               'No datasets.')));
      return;
    }
    this.tbody.replaceChildren(...datasets.map((d) => {
      const owner = d.owner ? `?owner=${encodeURIComponent(d.owner)}` : '';
      const href = `#/datasets/${encodeURIComponent(ref(d))}${owner}`;
      return h('tr', {class: 'clickable', testid: `dataset-row-${ref(d)}`,
                      onclick: (ev) => { if (ev.target.tagName !== 'A') location.hash = href; }},
        h('td', {}, h('a', {href, testid: 'dataset-link'}, ref(d))),
        h('td', {}, d.owner || ''),
        h('td', {}, fmtBytes(Number(d.sizeBytes || 0))),
        h('td', {class: 'mono', title: d.sha256 || ''}, short(d.sha256)),
        h('td', {}, d.fileName || ''),
        h('td', {}, h('time', {datetime: d.createTime || ''}, fmtTime(d.createTime))));
    }));
  }
}

export class DatasetView {
  // `refText`: "name:version" (or "sha256:<hex>"); `owner`: for an admin
  // looking at another owner's dataset.
  constructor(refText, owner) {
    this.ref = refText;
    this.owner = owner || '';
    this.stopped = false;
  }

  async start() {
    document.title = `traind — dataset ${this.ref}`;
    const q = this.owner ? `?owner=${encodeURIComponent(this.owner)}` : '';
    let d;
    try {
      d = await api(`/api/v1/datasets/${encodeURIComponent(this.ref)}${q}`);
    } catch (e) {
      if (e instanceof AuthError || this.stopped) return;
      setMain(h('p', {class: 'error', role: 'alert', testid: 'dataset-error'}, e.message));
      return;
    }
    if (this.stopped) return;
    const p = d.profile || {};
    const facts = [
      ['Owner', d.owner || '–'],
      ['Size', fmtBytes(Number(d.sizeBytes || 0))],
      ['Rows', String(p.rows || 0)],
      ['Columns', String((p.columns || []).length)],
      ['SHA-256', h('span', {class: 'mono', testid: 'dataset-sha256'}, d.sha256 || '')],
      ['File', d.fileName || '–'],
      ['Created', h('time', {datetime: d.createTime || ''}, fmtTime(d.createTime))],
    ];
    const num = (c, k) => (c.kind === 'NUMERIC' ? fmtNumber(c[k] || 0) : '');
    const columns = (p.columns || []).map((c) => h('tr', {testid: `profile-row-${c.name}`},
      h('th', {scope: 'row'}, c.name),
      h('td', {}, humanEnum(c.kind || '')),
      h('td', {class: 'num'}, String(c.missing || 0)),
      h('td', {class: 'num'}, `${c.distinct || 0}${c.distinctCapped ? '+' : ''}`),
      h('td', {class: 'num'}, num(c, 'min')),
      h('td', {class: 'num'}, num(c, 'max')),
      h('td', {class: 'num'}, num(c, 'mean')),
      h('td', {}, (c.valueCounts || []).map((v) => `${v.value} (${v.count})`).join(', '))));
    const jobs = (d.jobIds || []).map((id) => h('li', {}, h('a', {href: `#/jobs/${encodeURIComponent(id)}`,
                                                                  class: 'mono', testid: 'dataset-job'}, id)));
    setMain(h('section', {testid: 'dataset-view', 'aria-labelledby': 'dataset-title'},
              h('p', {}, h('a', {href: '#/datasets'}, '← Datasets')),
              h('h1', {id: 'dataset-title'}, ref(d)),
              h('dl', {class: 'facts'}, facts.map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v)))),
              h('h2', {}, 'Profile'),
              h('div', {class: 'table-wrap'},
                h('table', {class: 'jobs', testid: 'profile-table'},
                  h('thead', {}, h('tr', {},
                    ['Column', 'Kind', 'Missing', 'Distinct', 'Min', 'Max', 'Mean', 'Values (count)']
                      .map((c) => h('th', {scope: 'col'}, c)))),
                  h('tbody', {}, columns))),
              h('h2', {}, 'Jobs that trained on it'),
              jobs.length ? h('ul', {testid: 'dataset-jobs'}, jobs) : h('p', {class: 'muted'}, 'None yet.')));
  }

  stop() {
    this.stopped = true;
  }
}
