// A search job's trials: a sortable table (rank, trial, state, parameters,
// the search metric's mean ± std over the trial's folds, epochs per fold),
// the score against one parameter, and the choice of the trial whose folds
// the curves show.
import {fmtMeanStd, fmtNumber, h, stateBadge} from './dom.js';

// The search metric ("val.accuracy"; val.loss by default), or null.
export function searchMetric(spec) {
  const s = spec && spec.search;
  return s ? s.metric || 'val.loss' : null;
}

// Where task i of a search job sits: {trial, fold}, {refit: true} (the refit
// of the best trial), or null for a job that is not a search.
export function locateSearchTask(job, i) {
  const spec = (job && job.spec) || {};
  if (!spec.search) return null;
  const trials = (job.result && job.result.trials) || [];
  for (const t of trials) {
    const first = t.firstTask || 0;
    if (i >= first && i < first + (t.tasks || 0)) return {trial: t.trial || 0, fold: i - first};
  }
  if (trials.length) return {refit: true};
  // Before the first result: the tasks of a trial from the spec.
  const cv = spec.crossValidation;
  const per = cv && cv.folds ? cv.folds * Math.max(cv.repeats || 1, 1) : 1;
  const total = (job.tasks || []).length;
  if (spec.search.refitBest && total && i === total - 1) return {refit: true};
  return {trial: Math.floor(i / per), fold: i % per};
}

// The shortest '.'-separated suffix of each path that no other path ends
// with ("optimizer.adam.learning_rate" -> "learning_rate").
function shortNames(paths) {
  return paths.map((p) => {
    const parts = p.split('.');
    for (let take = 1; take <= parts.length; ++take) {
      const name = parts.slice(parts.length - take).join('.');
      if (paths.every((q) => q === p || !(q === name || q.endsWith(`.${name}`)))) return name;
    }
    return p;
  });
}

// A parameter's value (JSON text) as a number, or null.
function numeric(text) {
  const x = Number(text);
  return text !== undefined && text !== '' && Number.isFinite(x) ? x : null;
}

const COLUMNS = [
  {key: 'rank', title: 'Rank', value: (t) => (t.rank ? t.rank : Infinity)},
  {key: 'trial', title: 'Trial', value: (t) => t.trial || 0},
  {key: 'state', title: 'State', value: (t) => t.state || ''},
];

export class TrialsView {
  // onSelect(trial): the user chose a trial.
  constructor(onSelect) {
    this.onSelect = onSelect;
    this.sortKey = 'rank';
    this.sortDir = 1;
    this.selected = null;  // a trial the user chose; else the best one
    this.param = null;
    this.table = h('table', {class: 'trials', testid: 'trial-table'});
    this.select = h('select', {id: 'trial-param', testid: 'trial-param',
                               onchange: () => { this.param = this.select.value; this.renderPlot(); }});
    this.plot = h('div', {class: 'trial-plot', testid: 'trial-plot'});
    this.caption = h('p', {class: 'muted', testid: 'trial-caption'});
    this.box = h('section', {'aria-labelledby': 'trials-title', testid: 'trials'},
      h('h2', {id: 'trials-title'}, 'Trials'),
      this.caption,
      h('div', {class: 'trials-layout'},
        h('div', {class: 'table-wrap'}, this.table),
        h('figure', {class: 'trial-figure'},
          h('figcaption', {}, h('label', {for: 'trial-param'}, 'Score against '), this.select),
          this.plot)));
    this.job = null;
  }

  element() {
    return this.box;
  }

  // The trial whose folds the curves show.
  current() {
    if (this.selected !== null) return this.selected;
    const result = (this.job && this.job.result) || {};
    if (result.bestTrial !== undefined && result.bestTrial !== null && result.bestTrial >= 0) return result.bestTrial;
    return 0;
  }

  choose(trial) {
    this.selected = trial;
    this.render(this.job);
    this.onSelect(trial);
  }

  render(job) {
    this.job = job;
    const result = job.result || {};
    const trials = result.trials || [];
    const metric = searchMetric(job.spec);
    const key = metric.replace(/^val\./, '');
    const params = [...new Set(trials.flatMap((t) => Object.keys(t.params || {})))].sort();
    const short = shortNames(params);
    const columns = [...COLUMNS,
      ...params.map((p, k) => ({key: `param:${p}`, title: short[k], full: p, param: p,
                             value: (t) => { const v = (t.params || {})[p]; const x = numeric(v); return x === null ? v || '' : x; }})),
      {key: 'score', title: metric, value: (t) => (t.val && t.val[key] ? t.val[key].mean : -Infinity)},
      {key: 'epochs', title: 'Epochs / fold', value: (t) => (t.tasks ? (t.epochsRun || 0) / t.tasks : 0)}];
    const column = columns.find((c) => c.key === this.sortKey) || columns[0];
    const sorted = [...trials].sort((a, b) => {
      const x = column.value(a);
      const y = column.value(b);
      const order = typeof x === 'number' && typeof y === 'number' ? x - y : String(x).localeCompare(String(y));
      return this.sortDir * order || (a.trial || 0) - (b.trial || 0);
    });
    const current = this.current();
    const best = result.bestTrial;
    this.caption.replaceChildren(
      `${trials.length} trials ranked by ${metric}, mean ± std over each trial's folds. `,
      best !== undefined && best >= 0 ? `Best: trial ${best} (an optimistic estimate: it was chosen on these folds). ` : '',
      `The curves show trial ${current}'s folds: click a trial to see another.`);
    const head = h('tr', {}, columns.map((c) => {
      const sortedBy = c.key === this.sortKey;
      return h('th', {scope: 'col', testid: `trial-sort-${c.key}`, title: c.full || null,
                      'aria-sort': sortedBy ? (this.sortDir > 0 ? 'ascending' : 'descending') : 'none'},
        h('button', {type: 'button', class: 'sort', onclick: () => {
          if (this.sortKey === c.key) this.sortDir = -this.sortDir;
          else { this.sortKey = c.key; this.sortDir = c.key === 'score' ? -1 : 1; }
          this.render(this.job);
        }}, c.title, sortedBy ? (this.sortDir > 0 ? ' ▲' : ' ▼') : ''));
    }));
    const rows = sorted.map((t) => {
      const trial = t.trial || 0;
      const summary = t.val && t.val[key];
      const perFold = t.tasks ? (t.epochsRun || 0) / t.tasks : 0;
      return h('tr', {class: `clickable${trial === current ? ' selected' : ''}`, tabindex: 0,
                      testid: `trial-row-${trial}`, 'data-trial': trial, 'data-state': t.state || '',
                      'aria-selected': trial === current ? 'true' : 'false',
                      onclick: () => this.choose(trial),
                      onkeydown: (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); this.choose(trial); } }},
        h('td', {class: 'num', testid: 'trial-rank'}, t.rank ? String(t.rank) : '–'),
        h('td', {class: 'num'}, String(trial)),
        h('td', {}, stateBadge(t.state || 'QUEUED', 'trial-state')),
        params.map((p) => h('td', {class: 'mono'}, (t.params || {})[p] || '–')),
        h('td', {class: 'num', testid: 'trial-score'}, summary ? fmtMeanStd(summary) : '–'),
        h('td', {class: 'num'}, Number.isInteger(perFold) ? String(perFold) : perFold.toFixed(1)));
    });
    this.table.replaceChildren(h('thead', {}, head), h('tbody', {}, rows));
    const numericParams = params.filter((p) => trials.some((t) => numeric((t.params || {})[p]) !== null));
    const choices = numericParams.length ? numericParams : params;
    if (!choices.includes(this.param)) this.param = choices[0] || null;
    const sig = choices.join('|');
    if (sig !== this.selectSig) {
      this.selectSig = sig;
      this.select.replaceChildren(...choices.map((p) => h('option', {value: p}, p)));
    }
    if (this.param) this.select.value = this.param;
    this.renderPlot();
  }

  // The score of each trial that has one against the chosen parameter:
  // numbers on a linear or (spanning 2+ decades) log axis, other values as
  // categories.
  renderPlot() {
    const job = this.job;
    const trials = ((job && job.result && job.result.trials) || []);
    const key = searchMetric(job.spec).replace(/^val\./, '');
    const p = this.param;
    const points = trials.filter((t) => t.val && t.val[key] && p)
      .map((t) => ({trial: t.trial || 0, raw: (t.params || {})[p], y: t.val[key].mean}));
    const W = 420, H = 240, L = 56, R = 12, T = 12, B = 40;
    const svgNS = 'http://www.w3.org/2000/svg';
    const el = (tag, attrs, text) => {
      const e = document.createElementNS(svgNS, tag);
      for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
      if (text !== undefined) e.textContent = text;
      return e;
    };
    const svg = el('svg', {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
                           'aria-label': `${key} of each trial against ${p || 'its parameters'}`});
    this.plot.replaceChildren(svg);
    this.plot.dataset.points = String(points.length);
    if (!points.length) {
      svg.append(el('text', {x: W / 2, y: H / 2, 'text-anchor': 'middle', class: 'muted'}, 'No trial has a score yet'));
      return;
    }
    const nums = points.map((q) => numeric(q.raw));
    const isNum = nums.every((x) => x !== null);
    let xOf;
    let ticks;
    if (isNum) {
      const lo = Math.min(...nums);
      const hi = Math.max(...nums);
      const log = lo > 0 && hi / lo >= 100;
      const f = log ? Math.log10 : (x) => x;
      const a = f(lo);
      const b = f(hi) === a ? a + 1 : f(hi);
      xOf = (raw) => L + ((f(numeric(raw)) - a) / (b - a)) * (W - L - R) * 0.9 + (W - L - R) * 0.05;
      ticks = [...new Set(nums)].sort((x, y) => x - y).map((x) => ({at: xOf(String(x)), text: String(x)}));
      if (ticks.length > 6) ticks = [ticks[0], ticks[ticks.length - 1]];
      this.plot.dataset.scale = log ? 'log' : 'linear';
    } else {
      const cats = [...new Set(points.map((q) => q.raw))].sort();
      xOf = (raw) => L + ((cats.indexOf(raw) + 0.5) / cats.length) * (W - L - R);
      ticks = cats.map((c) => ({at: xOf(c), text: c}));
      this.plot.dataset.scale = 'categories';
    }
    const ys = points.map((q) => q.y);
    let y0 = Math.min(...ys);
    let y1 = Math.max(...ys);
    if (y1 === y0) { y0 -= 0.5; y1 += 0.5; }
    const pad = (y1 - y0) * 0.08;
    y0 -= pad;
    y1 += pad;
    const yOf = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
    svg.append(el('line', {x1: L, y1: H - B, x2: W - R, y2: H - B, class: 'axis'}));
    svg.append(el('line', {x1: L, y1: T, x2: L, y2: H - B, class: 'axis'}));
    for (const t of ticks) svg.append(el('text', {x: t.at, y: H - B + 16, 'text-anchor': 'middle', class: 'tick'}, t.text));
    for (const y of [y0 + pad, y1 - pad]) {
      svg.append(el('text', {x: L - 6, y: yOf(y) + 4, 'text-anchor': 'end', class: 'tick'}, fmtNumber(y, 4)));
    }
    svg.append(el('text', {x: (L + W - R) / 2, y: H - 6, 'text-anchor': 'middle', class: 'axis-label'}, p));
    svg.append(el('text', {x: 14, y: (T + H - B) / 2, 'text-anchor': 'middle', class: 'axis-label',
                           transform: `rotate(-90 14 ${(T + H - B) / 2})`}, key));
    const current = this.current();
    for (const q of points) {
      const c = el('circle', {cx: xOf(q.raw), cy: yOf(q.y), r: q.trial === current ? 7 : 5,
                              class: q.trial === current ? 'point selected' : 'point',
                              'data-testid': `trial-point-${q.trial}`, tabindex: 0});
      c.append(el('title', {}, `trial ${q.trial}: ${p} = ${q.raw}, ${key} ${fmtNumber(q.y)}`));
      c.addEventListener('click', () => this.choose(q.trial));
      svg.append(c);
    }
  }
}
