// A job's permutation importance (JobResult.importance): one horizontal bar
// per feature, most important first, from zero to its mean over the folds,
// with a ± std whisker; the table beside it holds the numbers.
import {fmtNumber, h} from './dom.js';

const svgNS = 'http://www.w3.org/2000/svg';

function el(tag, attrs, text) {
  const e = document.createElementNS(svgNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

// The section's content for `result`, or null when it has no importance.
export function importanceChart(result) {
  const rows = (result && result.importance) || [];
  if (!rows.length) return null;
  const folds = ((result.folds || []).filter((f) => !f.refit)).length;
  const metric = result.importanceMetric || 'the metric';
  const mean = (f) => Number(f.mean) || 0;
  const std = (f) => Number(f.std) || 0;
  const lo = Math.min(0, ...rows.map((f) => mean(f) - std(f)));
  const hi = Math.max(0, ...rows.map((f) => mean(f) + std(f)));
  const span = hi - lo || 1;
  const barH = 18, gap = 6, L = 150, R = 16, T = 8, B = 24, W = 520;
  const H = T + B + rows.length * (barH + gap);
  const x = (v) => L + ((v - lo) / span) * (W - L - R);
  const svg = el('svg', {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img',
                         'aria-label': `Permutation importance of each feature: how much ${metric} worsens when it is shuffled`});
  svg.append(el('line', {x1: x(0), x2: x(0), y1: T - 4, y2: H - B + 2, class: 'axis'}));
  rows.forEach((f, i) => {
    const y = T + i * (barH + gap);
    const m = mean(f);
    const name = f.feature || '';
    const label = el('text', {x: L - 6, y: y + barH / 2 + 4, 'text-anchor': 'end', class: 'importance-name'},
                     name.length > 22 ? `${name.slice(0, 21)}…` : name);
    label.append(el('title', {}, name));
    const bar = el('rect', {x: Math.min(x(0), x(m)), y, width: Math.max(1, Math.abs(x(m) - x(0))), height: barH,
                            class: m >= 0 ? 'importance-bar' : 'importance-bar negative',
                            'data-feature': name, 'data-mean': m});
    bar.append(el('title', {}, `${name}: ${fmtNumber(m)} ± ${fmtNumber(std(f))}`));
    svg.append(label, bar);
    if (std(f) > 0) {
      const cy = y + barH / 2;
      svg.append(el('line', {x1: x(m - std(f)), x2: x(m + std(f)), y1: cy, y2: cy, class: 'whisker'}),
                 el('line', {x1: x(m - std(f)), x2: x(m - std(f)), y1: cy - 4, y2: cy + 4, class: 'whisker'}),
                 el('line', {x1: x(m + std(f)), x2: x(m + std(f)), y1: cy - 4, y2: cy + 4, class: 'whisker'}));
    }
  });
  for (const v of [lo, 0, hi]) {
    if (v !== 0 && Math.abs(x(v) - x(0)) < 30) continue;
    svg.append(el('text', {x: x(v), y: H - 6, 'text-anchor': 'middle', class: 'muted'}, fmtNumber(v, 3)));
  }
  const table = h('table', {class: 'importance', testid: 'importance-table'},
    h('thead', {}, h('tr', {}, ['Feature', 'Importance', '± std', ...Array.from({length: (rows[0].values || []).length}, (_, k) => `fold ${k}`)]
      .map((c) => h('th', {scope: 'col'}, c)))),
    h('tbody', {}, rows.map((f) => h('tr', {testid: `importance-row-${f.feature}`},
      h('th', {scope: 'row'}, f.feature || ''),
      h('td', {class: 'num', testid: 'importance-mean'}, fmtNumber(mean(f))),
      h('td', {class: 'num'}, fmtNumber(std(f))),
      (f.values || []).map((v) => h('td', {class: 'num'}, fmtNumber(Number(v))))))));
  return [
    h('p', {class: 'muted key'},
      `How much ${metric} worsens when a feature's values are shuffled among a fold's validation rows: `,
      `mean ± std over ${folds} fold${folds === 1 ? '' : 's'}, most important first.`),
    h('div', {class: 'trials-layout'},
      h('div', {class: 'importance-chart', testid: 'importance-chart', 'data-features': rows.length}, svg),
      h('div', {class: 'table-wrap'}, table)),
  ];
}
