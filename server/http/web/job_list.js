// The job list: every job with its state, progress and score, polled.
import {AuthError, POLL_MS, api, fmtMeanStd, fmtTime, h, progressBar, selectionMetric, setMain, stateBadge, summaryOf, waitReasons} from './dom.js';
import {searchMetric} from './trials_view.js';

const JOB_STATES = ['QUEUED', 'RUNNING', 'CANCELLING', 'SUCCEEDED', 'FAILED', 'CANCELLED'];

export class JobListView {
  constructor() {
    this.timer = null;
    this.stopped = false;
    this.pageTokens = [''];  // tokens of the pages before and at the current one
    this.filterState = sessionStorage.getItem('traind.filterState') || '';
    this.filterName = sessionStorage.getItem('traind.filterName') || '';
  }

  start() {
    document.title = 'traind — jobs';
    const stateSelect = h('select', {id: 'filter-state', testid: 'filter-state'},
                          h('option', {value: ''}, 'all'),
                          JOB_STATES.map((s) => h('option', {value: s, selected: s === this.filterState}, s)));
    stateSelect.value = this.filterState;
    const nameInput = h('input', {id: 'filter-name', type: 'search', value: this.filterName,
                                  testid: 'filter-name', placeholder: 'name contains'});
    const onFilter = () => {
      this.filterState = stateSelect.value;
      this.filterName = nameInput.value;
      sessionStorage.setItem('traind.filterState', this.filterState);
      sessionStorage.setItem('traind.filterName', this.filterName);
      this.pageTokens = [''];
      this.refresh();
    };
    stateSelect.addEventListener('change', onFilter);
    nameInput.addEventListener('input', onFilter);
    this.tbody = h('tbody');
    this.status = h('p', {class: 'muted', testid: 'job-list-status'});
    this.prev = h('button', {type: 'button', onclick: () => { this.pageTokens.pop(); this.refresh(); }}, '← Newer');
    this.next = h('button', {type: 'button', testid: 'next-page', onclick: () => {
      if (this.nextToken) { this.pageTokens.push(this.nextToken); this.refresh(); }
    }}, 'Older →');
    setMain(h('section', {testid: 'job-list', 'aria-labelledby': 'jobs-title'},
              h('div', {class: 'title-row'},
                h('h1', {id: 'jobs-title'}, 'Jobs'),
                h('div', {class: 'filters'},
                  h('label', {for: 'filter-state'}, 'State '), stateSelect,
                  h('label', {for: 'filter-name'}, 'Name '), nameInput)),
              h('div', {class: 'table-wrap'},
                h('table', {class: 'jobs', testid: 'jobs-table'},
                  h('thead', {}, h('tr', {},
                    ['ID', 'Name', 'Owner', 'State', 'Progress', 'Selection metric (mean ± std)',
                     'Waiting for', 'Created'].map((c) => h('th', {scope: 'col'}, c)))),
                  this.tbody)),
              h('div', {class: 'pager'}, this.prev, this.next),
              this.status));
    this.refresh();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  async refresh() {
    clearTimeout(this.timer);
    const params = new URLSearchParams();
    if (this.filterState) params.append('state', this.filterState);
    if (this.filterName) params.set('name_contains', this.filterName);
    params.set('page_size', '50');
    const token = this.pageTokens[this.pageTokens.length - 1];
    if (token) params.set('page_token', token);
    try {
      const r = await api(`/api/v1/jobs?${params}`);
      if (this.stopped) return;
      this.render(r.jobs || []);
      this.nextToken = r.nextPageToken || '';
      this.status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    } catch (e) {
      if (e instanceof AuthError || this.stopped) return;
      this.status.textContent = `Could not load jobs: ${e.message}`;
    }
    this.prev.disabled = this.pageTokens.length <= 1;
    this.next.disabled = !this.nextToken;
    if (!this.stopped) this.timer = setTimeout(() => this.refresh(), POLL_MS);
  }

  render(jobs) {
    if (!jobs.length) {
      this.tbody.replaceChildren(h('tr', {}, h('td', {colspan: 8, class: 'muted', testid: 'no-jobs'}, 'No jobs.')));
      return;
    }
    this.tbody.replaceChildren(...jobs.map((job) => {
      const href = `#/jobs/${encodeURIComponent(job.id)}`;
      // A search is ranked by its search metric (its best trial's folds);
      // other jobs show the metric their best epochs were chosen by.
      const search = searchMetric(job.spec);
      const key = search ? search.replace(/^val\./, '') : selectionMetric(job.result && job.result.selection);
      const summary = summaryOf(job.result, key);
      const label = search ? `${search} (best trial)` : job.result && job.result.selection;
      const row = h('tr', {class: 'clickable', testid: `job-row-${job.id}`, 'data-job-id': job.id,
                           onclick: (ev) => { if (ev.target.tagName !== 'A') location.hash = href; }},
        h('td', {}, h('a', {href, class: 'mono', testid: 'job-link'}, job.id)),
        h('td', {}, job.spec && job.spec.name ? job.spec.name : ''),
        h('td', {}, job.owner || ''),
        h('td', {}, stateBadge(job.state, 'job-state')),
        h('td', {}, progressBar(job, 'job-progress')),
        h('td', {testid: 'job-metric'}, summary ? h('span', {}, fmtMeanStd(summary), ' ',
                                                     h('span', {class: 'muted'}, label)) : '–'),
        h('td', {testid: 'job-wait'}, waitReasons(job)),
        h('td', {}, h('time', {datetime: job.createTime || ''}, fmtTime(job.createTime))));
      return row;
    }));
  }
}
