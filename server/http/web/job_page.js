// The job page: a job's state, its tasks, and its per-epoch curves, live from
// its event stream.
import {AuthError, CHART_MIN_INTERVAL_MS, PALETTE, POLL_MS, TERMINAL_JOB, api, failureText, fmtBytes, fmtMeanStd, fmtNumber, fmtTime, h, humanEnum, main, progressBar, setMain, stateBadge} from './dom.js';
import {importanceChart} from './importance_chart.js';
import {TrialsView, locateSearchTask, searchMetric} from './trials_view.js';

// protobuf JSON writes NaN and infinities as strings; they are not plotted.
// The data a job trains on: its stored dataset (a link), or its path.
function dataOf(data, owner) {
  if (data.datasetSha256) {
    const name = data.dataset && !data.dataset.startsWith('sha256:') ? data.dataset
                                                                      : `sha256:${data.datasetSha256}`;
    const q = owner ? `?owner=${encodeURIComponent(owner)}` : '';
    return h('span', {testid: 'job-dataset'},
             h('a', {href: `#/datasets/${encodeURIComponent(`sha256:${data.datasetSha256}`)}${q}`}, name),
             ' ', h('span', {class: 'mono muted', title: data.datasetSha256}, data.datasetSha256.slice(0, 12)));
  }
  return h('span', {class: 'mono', testid: 'job-data-path'}, data.path || '–');
}

// "1h 02m 05s", "3.2s": ended - started, or so far while it runs.
function durationOf(job) {
  if (!job.startTime) return '–';
  const start = Date.parse(job.startTime);
  const end = job.endTime ? Date.parse(job.endTime) : Date.now();
  if (!Number.isFinite(start) || !Number.isFinite(end)) return '–';
  const s = Math.max(end - start, 0) / 1000;
  const text = s < 60 ? `${s.toFixed(1)}s`
    : s < 3600 ? `${Math.floor(s / 60)}m ${String(Math.floor(s % 60)).padStart(2, '0')}s`
      : `${Math.floor(s / 3600)}h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')}m ${String(Math.floor(s % 60)).padStart(2, '0')}s`;
  return job.endTime ? text : `${text} so far`;
}

function finiteMap(m) {
  const out = {};
  for (const [k, v] of Object.entries(m || {})) {
    const x = Number(v);
    out[k] = Number.isFinite(x) ? x : null;
  }
  return out;
}

// Per task, the newest attempt's metrics per epoch.
class Curves {
  constructor() {
    this.tasks = new Map();    // task -> Map(epoch -> {attempt, train, val})
    this.metrics = new Set();  // metric keys seen ("loss", "accuracy", ...)
    this.hasVal = new Set();   // keys seen in val
    this.best = new Map();     // task -> best epoch (finished folds)
    this.version = 0;
  }

  task(i) {
    let t = this.tasks.get(i);
    if (!t) { t = new Map(); this.tasks.set(i, t); }
    return t;
  }

  addEpoch(e) {
    e = {...e, train: finiteMap(e.train), val: finiteMap(e.val)};
    const t = this.task(e.task || 0);
    const old = t.get(e.epoch);
    const attempt = e.attempt || 0;
    if (old && old.attempt > attempt) return;
    t.set(e.epoch, {attempt, train: e.train || {}, val: e.val || {}});
    for (const k of Object.keys(e.train || {})) this.metrics.add(k);
    for (const k of Object.keys(e.val || {})) { this.metrics.add(k); this.hasVal.add(k); }
    this.version++;
  }

  // A new attempt resumed after `resumed` epochs: the older attempts'
  // epochs after that are replaced by the new attempt's.
  resume(task, attempt, resumed) {
    const t = this.task(task);
    for (const [epoch, p] of t) {
      if (epoch > resumed && p.attempt < attempt) t.delete(epoch);
    }
    this.best.delete(task);
    this.version++;
  }

  setBest(task, epoch) {
    if (epoch) this.best.set(task, epoch);
    this.version++;
  }

  points(task) {
    const t = this.tasks.get(task);
    return t ? t.size : 0;
  }
}

// ---------------------------------------------------------------------------
// Job page
// ---------------------------------------------------------------------------

export class JobView {
  constructor(id) {
    this.id = id;
    this.stopped = false;
    this.timers = [];
    this.curves = new Curves();
    this.charts = new Map();  // metric -> {g, el, drawnVersion}
    this.lastSeq = 0;
    this.streamDone = false;
    this.source = null;
    this.frame = 0;
    this.lastDraw = 0;
    this.job = null;
    this.logscale = localStorage.getItem('traind.logscale') === '1';
    this.roll = Number(localStorage.getItem('traind.roll') || '1') || 1;
    this.jobFetch = null;
  }

  start() {
    document.title = `traind — job ${this.id}`;
    this.header = h('div', {class: 'job-header', testid: 'job-header'});
    this.failureBox = h('div', {class: 'failure', role: 'alert', testid: 'job-failure', hidden: true});
    this.trialsBox = h('div', {testid: 'trials-box'});  // a search's trials
    this.trials = null;
    this.summary = h('div', {class: 'summary', testid: 'job-summary'});
    this.foldBody = h('tbody');
    this.foldHead = h('thead');
    this.devices = h('div', {class: 'devices', testid: 'devices'}, h('p', {class: 'muted'}, 'Loading devices…'));
    this.artifacts = h('div', {testid: 'artifacts'}, h('p', {class: 'muted'}, 'Listed when the job ends.'));
    this.importanceBody = h('div', {testid: 'importance-body'});
    this.importanceBox = h('section', {'aria-labelledby': 'importance-title', testid: 'importance', hidden: true},
                           h('h2', {id: 'importance-title'}, 'Feature importance'), this.importanceBody);
    this.importanceSig = null;
    this.artifactsShown = false;
    this.chartsBox = h('div', {class: 'charts', testid: 'charts'},
                       h('p', {class: 'muted', testid: 'charts-empty'}, 'Waiting for the first epoch…'));
    this.legend = h('ul', {class: 'legend', testid: 'legend', 'aria-label': 'Folds'});
    this.streamStatus = h('span', {class: 'muted', testid: 'stream-status'}, 'connecting…');

    const logBox = h('input', {type: 'checkbox', id: 'opt-log', testid: 'toggle-log', checked: this.logscale});
    logBox.addEventListener('change', () => {
      this.logscale = logBox.checked;
      localStorage.setItem('traind.logscale', this.logscale ? '1' : '0');
      for (const c of this.charts.values()) c.g.updateOptions({logscale: this.logscale});
      this.markCharts();
    });
    const rollInput = h('input', {type: 'range', id: 'opt-roll', min: 1, max: 50, step: 1,
                                  value: this.roll, testid: 'smoothing'});
    const rollValue = h('output', {for: 'opt-roll', testid: 'smoothing-value'}, this.rollText());
    rollInput.addEventListener('input', () => {
      this.roll = Number(rollInput.value) || 1;
      localStorage.setItem('traind.roll', String(this.roll));
      rollValue.textContent = this.rollText();
      for (const c of this.charts.values()) c.g.updateOptions({rollPeriod: this.roll});
      this.markCharts();
    });
    const reset = h('button', {type: 'button', testid: 'reset-zoom', onclick: () => {
      for (const c of this.charts.values()) c.g.resetZoom();
    }}, 'Reset zoom');

    setMain(h('article', {class: 'job', testid: 'job-view', 'data-job-id': this.id},
      h('nav', {class: 'crumbs', 'aria-label': 'Breadcrumb'}, h('a', {href: '#/', testid: 'back'}, '← Jobs')),
      this.header,
      this.failureBox,
      this.trialsBox,
      h('section', {'aria-labelledby': 'curves-title'},
        h('div', {class: 'title-row'},
          h('h2', {id: 'curves-title'}, 'Curves'),
          h('div', {class: 'controls', role: 'group', 'aria-label': 'Chart options'},
            h('label', {for: 'opt-log'}, logBox, ' Log scale'),
            h('label', {for: 'opt-roll'}, 'Smoothing ', rollInput, ' ', rollValue),
            reset,
            this.streamStatus)),
        h('p', {class: 'muted key'}, 'Solid: validation · dashed: training · thick black: mean of the folds\' validation curves with a ± std band · ★ best epoch of a finished fold. Drag to zoom, double-click to reset.'),
        this.legend,
        this.chartsBox),
      h('section', {'aria-labelledby': 'folds-title'},
        h('h2', {id: 'folds-title'}, 'Folds'),
        this.summary,
        h('div', {class: 'table-wrap'}, h('table', {class: 'folds', testid: 'fold-table'}, this.foldHead, this.foldBody))),
      this.importanceBox,
      h('section', {'aria-labelledby': 'artifacts-title'},
        h('h2', {id: 'artifacts-title'}, 'Artifacts'),
        this.artifacts),
      h('section', {'aria-labelledby': 'devices-title'},
        h('h2', {id: 'devices-title'}, 'Devices'),
        this.devices)));

    this.pollJob();
    this.pollDevices();
    this.openStream();
  }

  rollText() {
    return this.roll > 1 ? `${this.roll} epochs` : 'off';
  }

  stop() {
    this.stopped = true;
    for (const t of this.timers) clearTimeout(t);
    if (this.source) this.source.close();
    this.source = null;
    cancelAnimationFrame(this.frame);
    for (const c of this.charts.values()) c.g.destroy();
    this.charts.clear();
  }

  later(fn, ms) {
    const t = setTimeout(() => {
      this.timers = this.timers.filter((x) => x !== t);
      if (!this.stopped) fn();
    }, ms);
    this.timers.push(t);
  }

  // --- job --------------------------------------------------------------

  async pollJob() {
    if (this.jobFetch) return this.jobFetch;
    this.jobFetch = (async () => {
      try {
        const job = await api(`/api/v1/jobs/${encodeURIComponent(this.id)}`);
        if (this.stopped) return;
        this.job = job;
        this.renderJob();
        if (!TERMINAL_JOB.has(job.state)) this.later(() => this.pollJob(), POLL_MS);
        else if (!this.artifactsShown) this.loadArtifacts();
      } catch (e) {
        if (e instanceof AuthError || this.stopped) return;
        if (e.status === 404) {
          setMain(h('section', {testid: 'job-missing'}, h('h1', {}, 'Job not found'), h('p', {}, e.message),
                    h('p', {}, h('a', {href: '#/'}, '← Jobs'))));
          this.stop();
          return;
        }
        this.streamStatus.textContent = `Could not load the job: ${e.message}`;
        this.later(() => this.pollJob(), POLL_MS);
      } finally {
        this.jobFetch = null;
      }
    })();
    return this.jobFetch;
  }

  cv() {
    const spec = (this.job && this.job.spec) || {};
    const cv = spec.crossValidation || null;
    return {cv, folds: cv ? cv.folds || 0 : 0, repeats: cv ? Math.max(cv.repeats || 1, 1) : 1};
  }

  // The tasks the curves show: a search's selected trial's folds; all
  // others' tasks.
  charted(i) {
    if (!this.trials) return true;
    const at = locateSearchTask(this.job, i);
    return !!at && !at.refit && at.trial === this.trials.current();
  }

  taskLabel(i) {
    const at = locateSearchTask(this.job, i);
    if (at) return at.refit ? 'refit' : `trial ${at.trial} · fold ${at.fold}`;
    const {cv, folds, repeats} = this.cv();
    const task = this.job && this.job.tasks ? this.job.tasks.find((t) => t.index === i) : null;
    if (task && task.result && task.result.refit) return 'refit';
    if (!cv) return 'train';
    if (folds && i >= folds * repeats) return 'refit';
    if (!folds) return `task ${i}`;  // holdout: one task
    return repeats > 1 ? `r${Math.floor(i / folds)} f${i % folds}` : `fold ${i}`;
  }

  renderJob() {
    const job = this.job;
    const spec = job.spec || {};
    const {folds, repeats} = this.cv();
    const training = spec.training || {};
    const facts = [
      ['State', stateBadge(job.state, 'job-state')],
      ['Owner', job.owner || '–'],
      ['Data', dataOf(spec.data || {}, job.owner)],
      ['Progress', progressBar(job, 'job-progress')],
      ['Cross-validation', folds ? `${folds} folds${repeats > 1 ? ` × ${repeats} repeats` : ''}` : 'none'],
      spec.search ? ['Search', `${((job.result || {}).trials || []).length} trials by ${searchMetric(spec)}`] : null,
      ['Training', training.epochs ? `${training.epochs} epochs, batch ${training.batchSize || '–'}`
                                   : training.batches ? `${training.batches} batches` : '–'],
      ['Created', h('time', {datetime: job.createTime || ''}, fmtTime(job.createTime))],
      ['Started', h('time', {datetime: job.startTime || ''}, fmtTime(job.startTime))],
      ['Ended', h('time', {datetime: job.endTime || ''}, fmtTime(job.endTime))],
      ['Duration', h('span', {testid: 'job-duration'}, durationOf(job))],
    ];
    // The spec as submitted (defaults included), folded.
    const specText = JSON.stringify(spec, null, 2);
    const open = this.header.querySelector('details.spec');
    this.header.replaceChildren(
      h('h1', {}, spec.name || 'job', ' ', h('span', {class: 'mono muted', testid: 'job-id'}, job.id)),
      h('dl', {class: 'facts'}, facts.filter(Boolean).map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v)))),
      h('details', {class: 'spec', testid: 'job-spec', open: open ? open.open : false},
        h('summary', {}, 'Spec'), h('pre', {class: 'mono'}, specText)));
    if (spec.search) {
      if (!this.trials) {
        this.trials = new TrialsView(() => {
          this.legendSig = null;
          this.renderLegend();
          this.scheduleDraw();
        });
        this.trialsBox.replaceChildren(this.trials.element());
      }
      this.trials.render(job);
      // The trial the curves follow moves while the search runs (its best
      // so far, then the best): redraw when it did, even after the last event.
      if (this.chartsBox.dataset.trial !== undefined &&
          this.chartsBox.dataset.trial !== String(this.trials.current())) {
        this.legendSig = null;
        this.scheduleDraw();
      }
    }
    const failure = failureText(job.failure);
    this.failureBox.hidden = !failure;
    this.failureBox.replaceChildren(h('strong', {}, 'Job failed: '), failure);
    this.renderFolds();
    this.renderImportance();
    this.renderLegend();
    this.header.dataset.state = job.state;
    main.querySelector('[data-testid="job-view"]').dataset.state = job.state;
  }

  renderFolds() {
    const job = this.job;
    const tasks = job.tasks || [];
    const result = job.result || {};
    const keys = new Set();
    for (const t of tasks) for (const k of Object.keys((t.result && t.result.val) || {})) keys.add(k);
    for (const k of Object.keys(result.val || {})) keys.add(k.replace(/^val\./, ''));
    const metricKeys = [...keys].sort();
    this.foldHead.replaceChildren(h('tr', {},
      ['Task', 'Fold', 'Repeat', 'State', 'Epochs', 'Attempts', 'Retries', 'Best epoch',
       ...metricKeys.map((k) => `val ${k}`), 'Waiting for', 'Failures']
        .map((c) => h('th', {scope: 'col'}, c))));
    const {folds} = this.cv();
    this.foldBody.replaceChildren(...tasks.map((t) => {
      const r = t.result || null;
      const attempts = t.attempts || [];
      const failures = attempts.filter((a) => a.failure && (a.failure.reason || a.failure.message));
      const failureList = failures.length || (t.failure && t.failure.reason)
        ? h('ul', {class: 'failures'},
            failures.map((a) => h('li', {}, h('span', {class: 'muted'}, `attempt ${a.number}: `), failureText(a.failure))),
            !failures.length ? h('li', {}, failureText(t.failure)) : null)
        : '';
      const foldNo = r ? r.fold % (folds || Infinity) : folds ? t.index % folds : t.index;
      const repeat = r ? r.repeat || 0 : folds ? Math.floor(t.index / folds) : 0;
      return h('tr', {testid: `fold-row-${t.index}`, 'data-state': t.state},
        h('th', {scope: 'row'}, h('span', {class: 'swatch', style: `background:${this.color(t.index)}`}), ' ', this.taskLabel(t.index)),
        h('td', {}, r && r.refit ? 'refit' : String(foldNo)),
        h('td', {}, String(repeat)),
        h('td', {}, stateBadge(t.state, 'fold-state')),
        h('td', {}, `${t.state === 'SUCCEEDED' && r ? r.epochsRun || t.epochsDone : t.epochsDone || 0}/${t.epochsTotal || '–'}`),
        h('td', {testid: 'fold-attempts'}, String(attempts.length)),
        h('td', {}, String(Math.max(attempts.length - 1, 0))),
        h('td', {testid: 'fold-best'}, r && r.bestEpoch ? String(r.bestEpoch) : '–',
          r && r.stoppedEarly ? h('span', {class: 'muted'}, ' (stopped early)') : null),
        metricKeys.map((k) => h('td', {class: 'num', testid: `fold-val-${k}`}, r && r.val ? fmtNumber(r.val[k]) : '–')),
        h('td', {title: t.waitDetail || ''}, t.waitDetail && t.waitReason
          ? `${humanEnum(t.waitReason)} (${t.waitDetail})`
          : t.state === 'QUEUED' && t.waitReason && t.waitReason !== 'WAIT_REASON_UNSPECIFIED'
            ? `${humanEnum(t.waitReason)}${t.tasksAhead ? ` (${t.tasksAhead} ahead)` : ''}` : ''),
        h('td', {testid: 'fold-failure'}, failureList));
    }));
    const selection = result.selection || '';
    const entries = Object.entries(result.val || {}).sort(([a], [b]) => a.localeCompare(b));
    const doneFolds = (result.folds || []).filter((f) => !f.refit).length;
    this.summary.dataset.complete = result.complete ? 'true' : 'false';
    this.summary.replaceChildren(entries.length
      ? h('p', {},
          h('strong', {}, job.spec && job.spec.search && result.bestTrial >= 0 ? `Best trial ${result.bestTrial}: ` : '',
            result.complete ? `Validation mean ± std over ${doneFolds} folds: ` : `So far (${doneFolds} folds done): `),
          entries.map(([k, s], i) => h('span', {class: 'metric', testid: `summary-${k.replace(/^val\./, '')}`},
            i ? ' · ' : '', `${k} `, h('b', {}, fmtMeanStd(s)))),
          selection ? h('span', {class: 'muted'}, ` — best epoch by ${selection}`) : null)
      : h('p', {class: 'muted'}, 'No fold has finished yet.'));
  }

  // The folds' permutation importance, redrawn only when it changes.
  renderImportance() {
    const result = this.job.result || {};
    const sig = JSON.stringify([result.importance || [], result.importanceMetric || '']);
    if (sig === this.importanceSig) return;
    this.importanceSig = sig;
    const content = importanceChart(result);
    this.importanceBox.hidden = !content;
    this.importanceBody.replaceChildren(...(content || []));
  }

  color(task) {
    return PALETTE[task % PALETTE.length];
  }

  renderLegend() {
    const tasks = new Set([...(this.job ? (this.job.tasks || []).map((t) => t.index) : []), ...this.curves.tasks.keys()]);
    const sorted = [...tasks].filter((i) => this.charted(i)).sort((a, b) => a - b);
    const sig = sorted.join(',') + (this.job ? this.job.tasks.length : '') +
                (this.trials ? `|${this.trials.current()}|${((this.job.result || {}).trials || []).length}` : '');
    if (sig === this.legendSig) return;
    this.legendSig = sig;
    this.legend.replaceChildren(...sorted.map((i) =>
      h('li', {}, h('span', {class: 'swatch', style: `background:${this.color(i)}`}), ' ', this.taskLabel(i))));
  }

  // --- artifacts --------------------------------------------------------

  // The job's files once it has ended, each a download (the session's
  // cookie authorizes it; the bytes stream from traind).
  async loadArtifacts() {
    this.artifactsShown = true;
    try {
      const r = await api(`/api/v1/jobs/${encodeURIComponent(this.id)}/artifacts`);
      if (this.stopped) return;
      const list = (r && r.artifacts) || [];
      if (!list.length) {
        this.artifacts.replaceChildren(h('p', {class: 'muted'}, 'No files.'));
        return;
      }
      const href = (a) => `/api/v1/jobs/${encodeURIComponent(this.id)}/artifact?name=${encodeURIComponent(a.name)}`;
      this.artifacts.replaceChildren(h('div', {class: 'table-wrap'}, h('table', {testid: 'artifact-table'},
        h('thead', {}, h('tr', {}, ['Name', 'Kind', 'Task', 'Size'].map((c) => h('th', {scope: 'col'}, c)))),
        h('tbody', {}, list.map((a) => h('tr', {testid: `artifact-${a.name}`},
          h('td', {}, h('a', {href: href(a), download: '', class: 'mono', testid: 'artifact-link'}, a.name)),
          h('td', {}, humanEnum(a.kind || '')),
          h('td', {}, a.task === undefined || a.task < 0 ? 'job' : String(a.task)),
          h('td', {class: 'num', 'data-bytes': String(a.sizeBytes || 0)}, fmtBytes(Number(a.sizeBytes || 0)))))))));
    } catch (e) {
      if (e instanceof AuthError || this.stopped) return;
      this.artifactsShown = false;
      this.artifacts.replaceChildren(h('p', {class: 'muted'}, `Could not list the files: ${e.message}`));
    }
  }

  // --- devices ----------------------------------------------------------

  async pollDevices() {
    try {
      const r = await api('/api/v1/devices');
      if (this.stopped) return;
      this.renderDevices(r);
    } catch (e) {
      if (e instanceof AuthError || this.stopped) return;
      this.devices.replaceChildren(h('p', {class: 'muted'}, `Could not load devices: ${e.message}`));
    }
    this.later(() => this.pollDevices(), POLL_MS);
  }

  renderDevices(r) {
    const devices = r.devices || [];
    const cpus = devices.filter((d) => d.kind !== 'GPU');
    const gpus = devices.filter((d) => d.kind === 'GPU');
    const items = cpus.map((d) => h('p', {testid: `device-${d.id}`},
      h('strong', {}, 'CPU'), ` ${d.name || ''}: `,
      h('span', {testid: 'cpu-slots'}, `${d.slotsInUse || 0} of ${d.slots || 0} slots in use`),
      d.cores ? ` · ${d.cores} cores` : '',
      d.memoryTotalBytes && d.memoryTotalBytes !== '0'
        ? ` · memory ${fmtBytes(Number(d.memoryTotalBytes) - Number(d.memoryAvailableBytes || 0))} of ${fmtBytes(d.memoryTotalBytes)} used` : ''));
    if (gpus.length) {
      items.push(h('div', {class: 'table-wrap'}, h('table', {class: 'gpus', testid: 'gpu-table'},
        h('thead', {}, h('tr', {}, ['GPU', 'Model', 'State', 'Memory used', 'Worker', 'Note'].map((c) => h('th', {scope: 'col'}, c)))),
        h('tbody', {}, gpus.map((d) => {
          const total = Number(d.memoryTotalBytes || 0);
          const used = total - Number(d.memoryAvailableBytes || 0);
          return h('tr', {testid: `device-${d.id}`},
            h('th', {scope: 'row'}, d.id), h('td', {}, d.name || ''), h('td', {}, stateBadge(d.state)),
            h('td', {}, total ? h('span', {class: 'progress'},
              h('progress', {max: total, value: Math.max(used, 0), 'aria-label': `${fmtBytes(used)} of ${fmtBytes(total)}`}),
              h('span', {class: 'progress-text'}, `${fmtBytes(used)} / ${fmtBytes(total)}`)) : '–'),
            h('td', {}, d.workerPid ? `pid ${d.workerPid}` : ''), h('td', {}, d.note || ''));
        })))));
    }
    if (r.gpuNote) items.push(h('p', {class: 'muted', testid: 'gpu-note'}, r.gpuNote));
    this.devices.replaceChildren(...(items.length ? items : [h('p', {class: 'muted'}, 'No devices.')]));
  }

  // --- event stream -------------------------------------------------------

  openStream() {
    if (this.stopped || this.streamDone) return;
    const url = `/api/v1/jobs/${encodeURIComponent(this.id)}/events${this.lastSeq ? `?after=${this.lastSeq}` : ''}`;
    const source = new EventSource(url);
    this.source = source;
    source.addEventListener('open', () => {
      if (!this.stopped) this.streamStatus.textContent = 'live';
    });
    source.addEventListener('job', (msg) => this.onEvent(msg));
    source.addEventListener('error', async () => {
      if (this.stopped || this.streamDone) return;
      if (source.readyState === EventSource.CONNECTING) {
        this.streamStatus.textContent = 'reconnecting…';
        return;  // the browser reconnects with Last-Event-ID
      }
      // Closed for good (e.g. a 401 or 404): find out why, then retry.
      source.close();
      this.streamStatus.textContent = 'disconnected';
      try {
        await api('/api/v1/session');
      } catch (e) {
        return;  // the login view is shown on a 401
      }
      this.later(() => this.openStream(), POLL_MS);
    });
  }

  onEvent(msg) {
    if (this.stopped) return;
    let e;
    try {
      e = JSON.parse(msg.data);
    } catch (err) {
      return;
    }
    const seq = Number(e.sequence || msg.lastEventId || 0);
    if (seq && seq <= this.lastSeq) return;  // seen before a reconnect
    if (seq) this.lastSeq = seq;
    if (e.epoch) {
      this.curves.addEpoch(e.epoch);
    } else if (e.taskState) {
      const ts = e.taskState;
      if (ts.state === 'RUNNING' && ts.attempt > 1) this.curves.resume(ts.task || 0, ts.attempt, ts.resumedEpochs || 0);
      if (ts.result && ts.result.bestEpoch) this.curves.setBest(ts.task || 0, ts.result.bestEpoch);
      this.pollJobSoon();
    } else if (e.jobState) {
      this.pollJobSoon();
    }
    if (e.last) {
      this.streamDone = true;
      if (this.source) this.source.close();
      this.source = null;
      this.streamStatus.textContent = 'finished';
      this.pollJobSoon();
    }
    this.scheduleDraw();
  }

  pollJobSoon() {
    if (this.jobSoon) return;
    this.jobSoon = true;
    this.later(() => { this.jobSoon = false; this.pollJob(); }, 150);
  }

  // --- charts -------------------------------------------------------------

  scheduleDraw() {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      // Redraws that take long (many thousands of epochs) are spaced out
      // further, so the page stays responsive while events pour in.
      const gap = Math.max(CHART_MIN_INTERVAL_MS, 3 * (this.drawMs || 0));
      const wait = this.lastDraw + gap - performance.now();
      if (wait > 0) {
        this.later(() => this.scheduleDraw(), wait);
        return;
      }
      this.lastDraw = performance.now();
      this.draw();
      this.drawMs = performance.now() - this.lastDraw;
    });
  }

  // Rows of one metric's chart: [epoch, per task [val], [train], ..., mean].
  // Every value is a customBars triple [low, mid, high] (or null).
  chartData(metric, taskIds) {
    const c = this.curves;
    let maxEpoch = 0;
    for (const i of taskIds) for (const epoch of c.tasks.get(i).keys()) if (epoch > maxEpoch) maxEpoch = epoch;
    const withVal = c.hasVal.has(metric);
    const rows = [];
    const valSeries = taskIds.map((i) => c.tasks.get(i));
    const inMean = taskIds.map((i) => this.taskLabel(i) !== 'refit');
    for (let epoch = 1; epoch <= maxEpoch; ++epoch) {
      const row = [epoch];
      let sum = 0;
      let sum2 = 0;
      let n = 0;
      let any = false;
      for (let k = 0; k < valSeries.length; ++k) {
        const p = valSeries[k].get(epoch);
        const v = p ? p.val[metric] : undefined;
        const tr = p ? p.train[metric] : undefined;
        if (withVal) row.push(v === undefined || v === null ? null : [v, v, v]);
        row.push(tr === undefined || tr === null ? null : [tr, tr, tr]);
        const m = withVal ? v : tr;
        if (inMean[k] && m !== undefined && m !== null && Number.isFinite(m)) { sum += m; sum2 += m * m; ++n; any = true; }
      }
      if (any && n > 1) {
        const mean = sum / n;
        const std = Math.sqrt(Math.max(sum2 / n - mean * mean, 0));
        row.push([mean - std, mean, mean + std]);
      } else {
        row.push(null);
      }
      if (any || rows.length) rows.push(row);
    }
    return rows;
  }

  draw() {
    if (this.stopped || !window.Dygraph) {
      if (!window.Dygraph && !this.stopped) this.later(() => this.scheduleDraw(), 100);
      return;
    }
    const c = this.curves;
    const taskIds = [...c.tasks.keys()].filter((i) => c.tasks.get(i).size && this.charted(i))
      .sort((a, b) => a - b);
    if (this.trials) this.chartsBox.dataset.trial = String(this.trials.current());
    if (!taskIds.length) return;
    this.renderLegend();
    const emptyNote = this.chartsBox.querySelector('[data-testid="charts-empty"]');
    if (emptyNote) emptyNote.remove();
    const metrics = [...c.metrics].sort((a, b) => (a === 'loss' ? -1 : b === 'loss' ? 1 : a.localeCompare(b)));
    for (const metric of metrics) {
      const withVal = c.hasVal.has(metric);
      const labels = ['epoch'];
      const series = {};
      for (const i of taskIds) {
        const name = this.taskLabel(i);
        const color = this.color(i);
        if (withVal) {
          labels.push(`${name} val`);
          series[`${name} val`] = {color, strokeWidth: 1.5};
        }
        labels.push(`${name} train`);
        series[`${name} train`] = {color, strokeWidth: 1, strokePattern: [5, 4]};
      }
      const meanLabel = withVal ? 'mean val' : 'mean train';
      labels.push(meanLabel);
      series[meanLabel] = {color: '#111111', strokeWidth: 2.5, fillAlpha: 0.18};
      const data = this.chartData(metric, taskIds);
      if (!data.length) continue;
      let chart = this.charts.get(metric);
      const sig = labels.join('|');
      if (!chart) {
        chart = this.createChart(metric, data, labels, series);
        this.charts.set(metric, chart);
      } else {
        const opts = {file: data};
        if (chart.sig !== sig) Object.assign(opts, {labels, series});
        // dateWindow / valueRange are not passed: a user's zoom stays.
        chart.g.updateOptions(opts);
      }
      chart.sig = sig;
      this.annotate(chart, metric, withVal, taskIds);
      this.markChart(chart, metric, taskIds, withVal);
    }
  }

  createChart(metric, data, labels, series) {
    const plot = h('div', {class: 'plot', role: 'img', 'aria-label': `${metric} per epoch of every fold`});
    const labelsDiv = h('div', {class: 'plot-legend', 'aria-hidden': 'true'});
    const el = h('figure', {class: 'chart', testid: `chart-${metric}`, 'data-metric': metric},
                 h('figcaption', {}, metric), plot, labelsDiv);
    this.chartsBox.append(el);
    const g = new window.Dygraph(plot, data, {
      labels,
      series,
      customBars: true,
      connectSeparatedPoints: true,
      rollPeriod: this.roll,
      logscale: this.logscale,
      xlabel: 'epoch',
      ylabel: metric,
      legend: 'onmouseover',
      labelsDiv,
      labelsSeparateLines: false,
      hideOverlayOnMouseOut: true,
      highlightSeriesOpts: {strokeWidth: 2.5, highlightCircleSize: 3},
      highlightSeriesBackgroundAlpha: 0.6,
      fillAlpha: 0.18,
      animatedZooms: false,
      axes: {x: {valueFormatter: (x) => `epoch ${x}`}, y: {valueFormatter: (y) => fmtNumber(y)}},
      drawCallback: (graph) => {
        const [x0, x1] = graph.xAxisRange();
        el.dataset.xRange = `${x0},${x1}`;
        el.dataset.zoomed = graph.isZoomed() ? 'true' : 'false';
      },
    });
    return {g, el};
  }

  annotate(chart, metric, withVal, taskIds) {
    const notes = [];
    for (const i of taskIds) {
      const best = this.curves.best.get(i);
      if (!best) continue;
      const name = this.taskLabel(i);
      const p = this.curves.tasks.get(i).get(best);
      if (!p) continue;
      const series = withVal ? `${name} val` : `${name} train`;
      const v = withVal ? p.val[metric] : p.train[metric];
      if (v === undefined || v === null) continue;
      notes.push({series, x: best, shortText: '★', text: `${name}: best epoch ${best} (${metric} ${fmtNumber(v)})`,
                  cssClass: 'best-marker', width: 14, height: 14, tickHeight: 4});
    }
    const sig = notes.map((n) => `${n.series}@${n.x}`).join(',');
    if (sig !== chart.notesSig) {
      chart.notesSig = sig;
      chart.g.setAnnotations(notes);
    }
    chart.el.dataset.bestMarkers = String(notes.length);
  }

  markChart(chart, metric, taskIds, withVal) {
    const counts = {};
    let total = 0;
    for (const i of taskIds) {
      let n = 0;
      for (const p of this.curves.tasks.get(i).values()) {
        const v = withVal ? p.val[metric] : p.train[metric];
        if (v !== undefined && v !== null) ++n;
      }
      counts[String(i)] = n;
      total += n;
    }
    chart.el.dataset.points = String(total);
    chart.el.dataset.taskPoints = JSON.stringify(counts);
    chart.el.dataset.logscale = String(!!chart.g.getOption('logscale'));
    chart.el.dataset.rollPeriod = String(chart.g.rollPeriod());
    chart.el.dataset.lastSequence = String(this.lastSeq);
  }

  markCharts() {
    for (const chart of this.charts.values()) {
      chart.el.dataset.logscale = String(!!chart.g.getOption('logscale'));
      chart.el.dataset.rollPeriod = String(chart.g.rollPeriod());
    }
  }
}
