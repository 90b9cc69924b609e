// Drives traind's web dashboard in headless Chromium (playwright-core with
// Debian's /usr/bin/chromium) against a running traind:
//
//   node dashboard.test.mjs --url http://127.0.0.1:PORT --token VIEWER_TOKEN --job JOB_ID \
//        [--screenshot FILE] [--login-url URL] [--chromium /usr/bin/chromium] [--timeout SECONDS]
//        [--admin-token ADMIN_TOKEN --dataset NAME:VERSION]
//
// (or TRAIND_DASHBOARD_URL, TRAIND_TOKEN, TRAIND_JOB, TRAIND_SCREENSHOT,
// TRAIND_LOGIN_URL). The job should be a cross-validation job that is still
// running when the test starts, with enough epochs to watch it live.
//
// Checks: without a session the page shows the login (with the hint about
// `trainctl dashboard`) and no job data, and so does an expired login link; a
// bad token is refused; the token logs in; the job list shows the job; the job
// page draws every fold's curve, which gains points without a reload; a zoom
// survives new points; log scale and smoothing apply; the finished job shows
// the fold table, best epochs and mean ± std; a 401 on any call (after a
// logout elsewhere) brings back the login; nothing is fetched from outside
// traind. With --admin-token and --dataset (the dataset the job trains on,
// iris.csv, stored by the unix socket's admin): the job page names it; the
// viewer has no datasets; an admin sees it in the list, its profile (150
// rows, 50 of each species) and the job that trained on it. Exits 0 when
// every check passed.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import {chromium} from 'playwright-core';

function options() {
  const o = {
    url: process.env.TRAIND_DASHBOARD_URL,
    token: process.env.TRAIND_TOKEN,
    job: process.env.TRAIND_JOB,
    screenshot: process.env.TRAIND_SCREENSHOT,
    loginUrl: process.env.TRAIND_LOGIN_URL,
    chromium: process.env.CHROMIUM || '/usr/bin/chromium',
    adminToken: process.env.TRAIND_ADMIN_TOKEN,
    dataset: process.env.TRAIND_DATASET,
    searchJob: process.env.TRAIND_SEARCH_JOB,
    jobLoginUrl: process.env.TRAIND_JOB_LOGIN_URL,
    trialsScreenshot: process.env.TRAIND_TRIALS_SCREENSHOT,
    timeout: Number(process.env.TRAIND_TEST_TIMEOUT || 240),
  };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; ++i) {
    const [flag, inline] = argv[i].split(/=(.*)/s);
    const value = inline !== undefined ? inline : argv[++i];
    const key = {'--url': 'url', '--token': 'token', '--job': 'job', '--screenshot': 'screenshot',
                 '--login-url': 'loginUrl', '--chromium': 'chromium', '--timeout': 'timeout',
                 '--admin-token': 'adminToken', '--dataset': 'dataset', '--search-job': 'searchJob',
                 '--trials-screenshot': 'trialsScreenshot', '--job-login-url': 'jobLoginUrl'}[flag];
    if (!key) {
      console.error(`unknown argument ${flag}`);
      process.exit(2);
    }
    o[key] = key === 'timeout' ? Number(value) : value;
  }
  for (const k of ['url', 'token', 'job']) {
    if (!o[k]) {
      console.error(`usage: node dashboard.test.mjs --url URL --token TOKEN --job JOB_ID [--screenshot FILE] [--login-url URL]`);
      process.exit(2);
    }
  }
  o.url = o.url.replace(/\/+$/, '');
  return o;
}

const opt = options();
const deadline = Date.now() + opt.timeout * 1000;
const origin = new URL(opt.url).origin;
const outside = [];
const pageErrors = [];
let failures = 0;
let currentStep = '';

function log(...args) {
  console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s]`, ...args);
}
const started = Date.now();

// A failed fatal step ends the run (nothing after it can pass).
async function step(name, fn, {fatal = false} = {}) {
  currentStep = name;
  const t = Date.now();
  try {
    await fn();
    log(`ok   ${name} (${((Date.now() - t) / 1000).toFixed(1)}s)`);
  } catch (e) {
    failures++;
    log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    if (fatal) throw new Error(`${name} failed: stopping`);
  }
}

// Polls fn until it returns a truthy value (returned) or the time runs out.
async function until(what, fn, ms = 30000, every = 200) {
  const end = Math.min(Date.now() + ms, deadline);
  let last;
  for (;;) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) {
      last = e;
    }
    if (Date.now() > end) throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
    await new Promise((r) => setTimeout(r, every));
  }
}

const userDataRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'traind-dashboard-'));
const browser = await chromium.launch({
  executablePath: opt.chromium,
  headless: true,
  // playwright-core starts Chromium on a fresh temporary profile of its own.
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
         '--disable-background-networking', '--disable-component-update', '--disable-sync',
         `--disk-cache-dir=${path.join(userDataRoot, 'cache')}`],
  env: {...process.env, HOME: userDataRoot},
});

async function newContext() {
  const context = await browser.newContext({viewport: {width: 1400, height: 1000}, deviceScaleFactor: 1});
  // Only traind itself may be reached: anything else is recorded and refused.
  await context.route('**/*', (route) => {
    const u = route.request().url();
    if (u.startsWith(origin + '/') || u === origin) return route.continue();
    if (u.startsWith('data:') || u.startsWith('blob:')) return route.continue();
    outside.push(u);
    return route.abort();
  });
  return context;
}

function watchPage(page, label) {
  page.on('pageerror', (e) => pageErrors.push(`${label}: ${e.message}`));
  page.on('console', (m) => {
    if (m.type() === 'error' && !/401|Unauthorized/.test(m.text())) pageErrors.push(`${label} console: ${m.text()}`);
  });
  return page;
}

const tid = (id) => `[data-testid="${id}"]`;

// What of the job could a page without a session show? Nothing: no job id,
// no job list, no job view, no charts.
async function assertNoJobData(page) {
  await page.locator(tid('login-view')).waitFor({state: 'visible', timeout: 15000});
  const hint = await page.locator(tid('login-hint')).innerText();
  assert.match(hint, /trainctl dashboard/);
  for (const id of ['job-list', 'job-view', 'jobs-table', 'fold-table', 'charts', 'devices']) {
    assert.equal(await page.locator(tid(id)).count(), 0, `${id} shown without a session`);
  }
  const text = await page.locator('body').innerText();
  assert.ok(!text.includes(opt.job), 'the job id is on the page without a session');
}

async function login(page, token = opt.token) {
  await page.locator(tid('login-token')).fill(token);
  await page.locator(tid('login-submit')).click();
  await page.locator(tid('session-user')).waitFor({state: 'visible', timeout: 15000});
}

async function chartState(page, metric) {
  return page.evaluate((m) => {
    const el = document.querySelector(`[data-testid="chart-${m}"]`);
    if (!el) return null;
    return {points: Number(el.dataset.points || 0), tasks: JSON.parse(el.dataset.taskPoints || '{}'),
            xRange: el.dataset.xRange, zoomed: el.dataset.zoomed === 'true', logscale: el.dataset.logscale === 'true',
            rollPeriod: Number(el.dataset.rollPeriod || 1), best: Number(el.dataset.bestMarkers || 0)};
  }, metric);
}

async function jobFromPage(page) {
  return page.evaluate(async (id) => {
    const r = await fetch(`/api/v1/jobs/${id}`, {credentials: 'same-origin'});
    return r.ok ? r.json() : {status: r.status};
  }, opt.job);
}

try {
  // --- No session ---------------------------------------------------------
  const anon = await newContext();
  const anonPage = watchPage(await anon.newPage(), 'anonymous');

  await step('without a session the job list shows the login and no job data', async () => {
    await anonPage.goto(`${opt.url}/`);
    await assertNoJobData(anonPage);
    const status = await anonPage.evaluate(async () => (await fetch('/api/v1/jobs')).status);
    assert.equal(status, 401);
  }, {fatal: true});

  await step('without a session a job page shows the login and no job data', async () => {
    await anonPage.goto(`${opt.url}/#/jobs/${opt.job}`);
    await assertNoJobData(anonPage);
  });

  await step('an expired or unknown login link lands on the login view', async () => {
    await anonPage.goto(`${opt.url}/login?ticket=not-a-ticket`);
    await until('the ?login=expired redirect', () => new URL(anonPage.url()).search.includes('login=expired'), 10000);
    await assertNoJobData(anonPage);
    await until('the expired message', async () => /expired/i.test(await anonPage.locator(tid('login-error')).innerText()), 10000);
  });

  await step('a bad token is refused', async () => {
    await anonPage.goto(`${opt.url}/`);
    await anonPage.locator(tid('login-token')).fill('not-a-valid-token');
    await anonPage.locator(tid('login-submit')).click();
    await until('the error message', async () => /not valid/i.test(await anonPage.locator(tid('login-error')).innerText()), 10000);
    await assertNoJobData(anonPage);
  });

  if (opt.loginUrl) {
    await step('the one-time link of `trainctl dashboard` logs in once', async () => {
      const ctx = await newContext();
      const p = watchPage(await ctx.newPage(), 'ticket');
      await p.goto(opt.loginUrl);
      await p.locator(tid('session-user')).waitFor({state: 'visible', timeout: 15000});
      await p.locator(tid('job-list')).waitFor({timeout: 15000});
      const again = watchPage(await (await newContext()).newPage(), 'ticket-reuse');
      await again.goto(opt.loginUrl);
      await assertNoJobData(again);
      await ctx.close();
    });
  }
  if (opt.jobLoginUrl) {
    await step('`trainctl dashboard JOB` lands on the job\'s page', async () => {
      const ctx = await newContext();
      const p = watchPage(await ctx.newPage(), 'job-ticket');
      await p.goto(opt.jobLoginUrl);
      await p.locator(tid('session-user')).waitFor({state: 'visible', timeout: 15000});
      await p.locator(tid('job-view')).waitFor({timeout: 15000});
      assert.ok(p.url().endsWith(`#/jobs/${opt.job}`), p.url());
      assert.equal(await p.locator(tid('job-view')).getAttribute('data-job-id'), opt.job);
      await ctx.close();
    });
  }
  await anon.close();

  // --- Logged in -------------------------------------------------------------
  const ctx = await newContext();
  const page = watchPage(await ctx.newPage(), 'main');

  await step('the token logs in and the job list shows the job', async () => {
    await page.goto(`${opt.url}/`);
    await page.locator(tid('login-view')).waitFor();
    await login(page);
    const row = page.locator(tid(`job-row-${opt.job}`));
    await row.waitFor({timeout: 15000});
    const text = await row.innerText();
    assert.match(text, /QUEUED|RUNNING|SUCCEEDED|FAILED|CANCELLED/);
    assert.match(await row.locator(tid('job-progress')).innerText(), /\d+\/\d+/);
  }, {fatal: true});

  await step('the job list refreshes by itself', async () => {
    const first = await page.locator(tid('job-list-status')).innerText();
    await until('a refresh', async () => (await page.locator(tid('job-list-status')).innerText()) !== first, 10000);
  });

  // A page opened on the search before it runs and left open to its end:
  // it must follow the search to the best trial's curves by itself.
  let earlySearchPage = null;
  if (opt.searchJob) {
    earlySearchPage = watchPage(await ctx.newPage(), 'search (open from the start)');
    await earlySearchPage.goto(`${opt.url}/#/jobs/${opt.searchJob}`);
  }

  let job = null;
  let taskCount = 0;
  await step('a click opens the job page', async () => {
    await page.locator(tid(`job-row-${opt.job}`)).locator(tid('job-link')).click();
    await until('#/jobs/<id>', () => page.url().endsWith(`#/jobs/${opt.job}`), 5000);
    await page.locator(tid('job-view')).waitFor();
    job = await jobFromPage(page);
    taskCount = (job.tasks || []).length;
    assert.ok(taskCount >= 2, `a cross-validation job has tasks (${taskCount})`);
  }, {fatal: true});

  const metric = 'loss';
  let live = false;
  await step('every fold\'s curve has points', async () => {
    await until(`points of all ${taskCount} tasks on the ${metric} chart`, async () => {
      const s = await chartState(page, metric);
      return s && Object.keys(s.tasks).length === taskCount && Object.values(s.tasks).every((n) => n > 0);
    }, 120000, 250);
    const j = await jobFromPage(page);
    live = !['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(j.state);
    log(`job is ${j.state}; ${live ? 'watching it live' : 'finished already: the live checks are skipped'}`);
    assert.ok(await page.locator(tid('chart-accuracy')).count() === 1, 'an accuracy chart');
  });

  if (live) {
    await step('running folds gain points without a reload', async () => {
      const before = await chartState(page, metric);
      const navigations = [];
      page.on('framenavigated', (f) => { if (f === page.mainFrame()) navigations.push(f.url()); });
      const j = await jobFromPage(page);
      const running = (j.tasks || []).filter((t) => t.state === 'RUNNING' || t.state === 'STARTING' || t.state === 'QUEUED')
        .map((t) => String(t.index));
      assert.ok(running.length > 0, 'some fold still runs');
      await until('new points on every running fold', async () => {
        const now = await chartState(page, metric);
        const j2 = await jobFromPage(page);
        return running.every((i) => now.tasks[i] > before.tasks[i] ||
          ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(j2.tasks.find((t) => String(t.index) === i).state) && now.tasks[i] >= before.tasks[i]) &&
          now.points > before.points;
      }, 60000, 300);
      assert.deepEqual(navigations, [], 'the page did not reload');
    });

    await step('a zoom is kept while new points arrive', async () => {
      const box = await page.locator(`${tid(`chart-${metric}`)} .plot canvas`).first().boundingBox();
      assert.ok(box, 'the chart canvas');
      const y = box.y + box.height / 2;
      await page.mouse.move(box.x + box.width * 0.3, y);
      await page.mouse.down();
      await page.mouse.move(box.x + box.width * 0.45, y, {steps: 8});
      await page.mouse.move(box.x + box.width * 0.6, y, {steps: 8});
      await page.mouse.up();
      const zoomed = await until('the zoom', async () => {
        const s = await chartState(page, metric);
        return s.zoomed ? s : null;
      }, 5000);
      const j = await jobFromPage(page);
      if (['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(j.state)) return;  // too late to see new points
      await until('new points after the zoom', async () => (await chartState(page, metric)).points > zoomed.points, 30000, 300);
      const after = await chartState(page, metric);
      assert.ok(after.zoomed, 'still zoomed');
      assert.equal(after.xRange, zoomed.xRange, 'the x range did not move');
      await page.locator(tid('reset-zoom')).click();
      await until('the zoom reset', async () => !(await chartState(page, metric)).zoomed, 5000);
    });
  }

  await step('log scale and smoothing apply to the charts', async () => {
    await page.locator(tid('toggle-log')).check();
    await until('log scale', async () => (await chartState(page, metric)).logscale, 5000);
    await page.locator(tid('smoothing')).fill('5');
    await until('smoothing', async () => (await chartState(page, metric)).rollPeriod === 5, 5000);
    await page.locator(tid('smoothing')).fill('1');
    await page.locator(tid('toggle-log')).uncheck();
    await until('linear again', async () => !(await chartState(page, metric)).logscale, 5000);
  });

  await step('the devices panel shows CPU slots', async () => {
    await page.locator(tid('cpu-slots')).first().waitFor({timeout: 10000});
    assert.match(await page.locator(tid('cpu-slots')).first().innerText(), /\d+ of \d+ slots in use/);
  });

  let finalJob = null;
  await step('the job finishes on the open page', async () => {
    await until('a terminal state on the page', async () =>
      ['SUCCEEDED', 'FAILED', 'CANCELLED'].includes(await page.locator(tid('job-view')).getAttribute('data-state')),
    Math.max(deadline - Date.now() - 20000, 1000), 500);
    await until('the stream to finish', async () => (await page.locator(tid('stream-status')).innerText()) === 'finished', 15000);
    finalJob = await jobFromPage(page);
    assert.equal(finalJob.state, 'SUCCEEDED', `the job ${finalJob.state}: ${JSON.stringify(finalJob.failure || {})}`);
  });

  if (finalJob && finalJob.state === 'SUCCEEDED') {
    await step('the finished job shows the fold table, best epochs and mean ± std', async () => {
      await until('every fold row SUCCEEDED', async () => {
        const states = await page.locator(`${tid('fold-table')} tbody tr`).evaluateAll((rows) => rows.map((r) => r.dataset.state));
        return states.length === taskCount && states.every((s) => s === 'SUCCEEDED');
      }, 15000);
      for (const t of finalJob.tasks) {
        const row = page.locator(tid(`fold-row-${t.index}`));
        const best = await row.locator(tid('fold-best')).innerText();
        assert.equal(best.split(' ')[0], String(t.result.bestEpoch), `task ${t.index} best epoch`);
        assert.match(await row.locator(tid(`fold-val-${metric}`)).innerText(), /^\d|^[0-9.e+-]+$/);
      }
      await until('the summary', async () => (await page.locator(tid('job-summary')).getAttribute('data-complete')) === 'true', 10000);
      // The duration and the spec.
      assert.match(await page.locator(tid('job-duration')).innerText(), /^\d+(\.\d)?s$|^\d+m \d\ds$/);
      await page.locator(`${tid('job-spec')} summary`).click();
      const specText = await page.locator(`${tid('job-spec')} pre`).innerText();
      assert.equal(JSON.parse(specText).crossValidation.folds, 5);
      const summary = await page.locator(tid('job-summary')).innerText();
      assert.match(summary, /loss\s+[0-9.e+-]+ ± [0-9.e+-]+/);
      assert.match(summary, /over \d+ folds/);
      const s = await chartState(page, metric);
      assert.equal(s.best, finalJob.tasks.filter((t) => t.result && !t.result.refit).length, 'a best-epoch marker per fold');
      await page.locator(tid('back')).click();
      const row = page.locator(tid(`job-row-${opt.job}`));
      await row.waitFor({timeout: 10000});
      await until('mean ± std in the job list', async () => / ± /.test(await row.locator(tid('job-metric')).innerText()), 10000);
      await page.goBack();
      await page.locator(tid('job-view')).waitFor();
      await until('the charts again', async () => ((await chartState(page, metric)) || {}).best > 0, 30000);
    });
  }

  if (finalJob && finalJob.state === 'SUCCEEDED') {
    await step('the finished job lists its files, each a download', async () => {
      const row = page.locator(tid('artifact-predictions.csv'));
      await row.waitFor({timeout: 15000});
      const href = await row.locator(tid('artifact-link')).getAttribute('href');
      const got = await page.evaluate(async (u) => {
        const r = await fetch(u, {credentials: 'same-origin'});
        return {status: r.status, length: (await r.arrayBuffer()).byteLength,
                disposition: r.headers.get('content-disposition')};
      }, href);
      assert.equal(got.status, 200);
      assert.equal(String(got.length), await row.locator('td[data-bytes]').getAttribute('data-bytes'));
      assert.match(got.disposition, /^attachment; filename="/);
      assert.ok((await page.locator(`${tid('artifact-table')} tbody tr`).count()) > 5, 'models, predictions, logs');
    });
  }

  if (opt.screenshot) {
    await step('screenshot of the job page', async () => {
      await page.evaluate(() => window.scrollTo(0, 0));
      await page.mouse.move(5, 5);
      fs.mkdirSync(path.dirname(path.resolve(opt.screenshot)), {recursive: true});
      await page.screenshot({path: opt.screenshot, fullPage: true});
      log(`screenshot: ${opt.screenshot}`);
    });
  }

  if (opt.adminToken && opt.dataset) {
    const [name, version] = opt.dataset.split(':');
    await step('the job page names the dataset it trains on', async () => {
      const text = await page.locator(tid('job-dataset')).innerText();
      assert.match(text, new RegExp(`^${name}`));
    });
    await step('a viewer has no datasets of its own', async () => {
      const mine = watchPage(await ctx.newPage(), 'viewer datasets');
      await mine.goto(`${opt.url}/#/datasets`);
      await mine.locator(tid('no-datasets')).waitFor({timeout: 15000});
      await mine.close();
    });
    await step('an admin sees the dataset, its profile and the job that trained on it', async () => {
      const adminCtx = await newContext();
      const admin = watchPage(await adminCtx.newPage(), 'admin');
      await admin.goto(`${opt.url}/`);
      await login(admin, opt.adminToken);
      await admin.locator(tid('nav-datasets')).click();
      const row = admin.locator(tid(`dataset-row-${name}:${version}`));
      await row.waitFor({timeout: 15000});
      await row.locator(tid('dataset-link')).click();
      await admin.locator(tid('dataset-view')).waitFor({timeout: 15000});
      assert.equal(await admin.locator(`${tid('profile-table')} tbody tr`).count(), 5);
      const species = await admin.locator(tid('profile-row-species')).innerText();
      for (const c of ['setosa (50)', 'versicolor (50)', 'virginica (50)']) assert.ok(species.includes(c), species);
      const petal = await admin.locator(tid('profile-row-petal_length')).innerText();
      // iris.csv's petal_length, by hand: no missing, 43 distinct, 1.0 to 6.9, mean 3.758.
      assert.match(petal, /numeric\s+0\s+43\s+1\.0000\s+6\.9000\s+3\.7580/);
      const jobs = await admin.locator(tid('dataset-jobs')).innerText();
      assert.ok(jobs.includes(opt.job), jobs);
      await adminCtx.close();
    });
  }

  if (opt.searchJob) {
    await step('a search job: a row per trial best first, its labels, its folds\' curves, the score plot, the importance chart', async () => {
      await page.goto(`${opt.url}/#/jobs/${opt.searchJob}`);
      await page.locator(tid('job-view')).waitFor();
      await until('the search to succeed', async () =>
        (await page.locator(tid('job-view')).getAttribute('data-state')) === 'SUCCEEDED',
      Math.max(deadline - Date.now() - 20000, 1000), 500);
      const job = await page.evaluate(async (id) => (await fetch(`/api/v1/jobs/${id}`)).json(), opt.searchJob);
      const trials = job.result.trials;
      const best = job.result.bestTrial;
      assert.ok(trials.length >= 2 && best >= 0, `trials ${trials.length}, best ${best}`);
      const rows = `${tid('trial-table')} tbody tr`;
      await until('a row per trial', async () => (await page.locator(rows).count()) === trials.length, 15000);
      // Ranked: the best trial first, its score the API's.
      const first = page.locator(rows).first();
      assert.equal(await first.getAttribute('data-trial'), String(best));
      assert.equal(await first.locator(tid('trial-rank')).innerText(), '1');
      const bestTrial = trials.find((t) => t.trial === best);
      const [mean] = (await first.locator(tid('trial-score')).innerText()).split(' ± ');
      assert.ok(Math.abs(Number(mean) - bestTrial.val.accuracy.mean) < 1e-4, `score ${mean}`);
      // Every task labelled by its trial and fold; "refit" only for the refit task.
      const expected = [];
      for (const t of [...trials].sort((a, b) => a.firstTask - b.firstTask)) {
        for (let f = 0; f < t.tasks; ++f) expected.push(`trial ${t.trial} · fold ${f}`);
      }
      expected.push('refit');
      const labels = (await page.locator(`${tid('fold-table')} tbody th`).allInnerTexts()).map((s) => s.trim());
      assert.deepEqual(labels, expected);
      // The curves: the best trial's folds, with their own band.
      const legendOf = async () => (await page.locator(`${tid('legend')} li`).allInnerTexts()).map((s) => s.trim());
      await until('the best trial\'s curves', async () =>
        (await page.locator(tid('charts')).getAttribute('data-trial')) === String(best), 15000);
      await until('the best trial\'s legend', async () => {
        const legend = await legendOf();
        return legend.length === bestTrial.tasks && legend.every((l) => l.startsWith(`trial ${best} · fold `));
      }, 15000);
      const tasksOf = (t) => Array.from({length: t.tasks}, (_, k) => String(t.firstTask + k)).sort();
      assert.deepEqual(Object.keys((await chartState(page, 'accuracy')).tasks).sort(), tasksOf(bestTrial));
      // The page open since before the search ran shows the best trial too.
      await earlySearchPage.bringToFront();
      await until('the best trial\'s curves on the page open from the start', async () =>
        (await earlySearchPage.locator(tid('charts')).getAttribute('data-trial')) === String(best), 15000);
      await until('the best trial\'s folds charted on the page open from the start', async () => {
        const s = await chartState(earlySearchPage, 'accuracy');
        return s && JSON.stringify(Object.keys(s.tasks).sort()) === JSON.stringify(tasksOf(bestTrial));
      }, 15000);
      await earlySearchPage.close();
      await page.bringToFront();
      // A click on another trial shows its folds.
      const other = trials.find((t) => t.trial !== best);
      await page.locator(tid(`trial-row-${other.trial}`)).click();
      await until('the other trial\'s curves', async () => {
        const s = await chartState(page, 'accuracy');
        return s && JSON.stringify(Object.keys(s.tasks).sort()) === JSON.stringify(tasksOf(other));
      }, 15000);
      assert.ok((await legendOf()).every((l) => l.startsWith(`trial ${other.trial} · fold `)));
      assert.equal(await page.locator(tid(`trial-row-${other.trial}`)).getAttribute('aria-selected'), 'true');
      // The score against a parameter: a point per trial, the chosen one marked.
      assert.equal(await page.locator(tid('trial-plot')).getAttribute('data-points'), String(trials.length));
      assert.equal(await page.locator(`${tid('trial-plot')} circle.selected`).count(), 1);
      // Sorted by trial on a click of its header.
      await page.locator(`${tid('trial-sort-trial')} button`).click();
      const order = await page.locator(rows).evaluateAll((rs) => rs.map((r) => Number(r.dataset.trial)));
      assert.deepEqual(order, [...order].sort((a, b) => a - b));
      // Feature importance (the search asked for it): a bar per feature,
      // most important first, the API's numbers and metric.
      const imp = job.result.importance || [];
      assert.equal(imp.length, 4, JSON.stringify(job.result));
      await page.locator(tid('importance-chart')).waitFor({timeout: 10000});
      assert.equal(await page.locator(`${tid('importance-chart')} rect.importance-bar`).count(), 4);
      assert.deepEqual(await page.locator(`${tid('importance-table')} tbody th`).allInnerTexts(),
                       imp.map((f) => f.feature));
      for (const f of imp) {
        const shown = Number(await page.locator(`${tid(`importance-row-${f.feature}`)} ${tid('importance-mean')}`).innerText());
        assert.ok(Math.abs(shown - f.mean) <= Math.max(5e-5, 5e-3 * Math.abs(f.mean)), `${f.feature}: ${shown} vs ${f.mean}`);
      }
      const means = imp.map((f) => f.mean);
      assert.deepEqual(means, [...means].sort((a, b) => b - a));
      assert.ok(job.result.importanceMetric && (await page.locator(tid('importance')).innerText()).includes(job.result.importanceMetric),
                job.result.importanceMetric);
      if (opt.trialsScreenshot) {
        const importanceShot = path.join(path.dirname(path.resolve(opt.trialsScreenshot)), 'importance.png');
        fs.mkdirSync(path.dirname(importanceShot), {recursive: true});
        await page.locator(tid('importance')).screenshot({path: importanceShot});
        log(`importance screenshot: ${importanceShot}`);
      }
      if (opt.trialsScreenshot) {
        await page.locator(tid(`trial-row-${best}`)).click();
        await page.mouse.move(5, 5);
        fs.mkdirSync(path.dirname(path.resolve(opt.trialsScreenshot)), {recursive: true});
        await page.locator(tid('job-view')).screenshot({path: opt.trialsScreenshot});
        log(`trials screenshot: ${opt.trialsScreenshot}`);
      }
      // The job list: the search's own metric.
      await page.locator(tid('back')).click();
      const row = page.locator(tid(`job-row-${opt.searchJob}`));
      await row.waitFor({timeout: 10000});
      await until('the search metric in the job list', async () =>
        /val\.accuracy \(best trial\)/.test(await row.locator(tid('job-metric')).innerText()), 10000);
    });
  }

  await step('a 401 on any call brings back the login and drops the job data', async () => {
    const other = watchPage(await ctx.newPage(), 'second tab');
    await other.goto(`${opt.url}/`);
    await other.locator(tid('logout')).click();
    await assertNoJobData(other);
    // The first tab shares the (now cleared) cookie: its next poll is a 401.
    await page.locator(tid('login-view')).waitFor({timeout: 10000});
    await assertNoJobData(page);
    const status = await page.evaluate(async () => (await fetch('/api/v1/session')).status);
    assert.equal(status, 401);
  });

  await step('nothing was fetched from outside traind and no script failed', async () => {
    assert.deepEqual(outside, []);
    assert.deepEqual(pageErrors, []);
  });
} catch (e) {
  failures++;
  log(`stopped at "${currentStep}": ${e && e.message ? e.message : e}`);
} finally {
  await browser.close().catch(() => {});
  fs.rmSync(userDataRoot, {recursive: true, force: true});
}

if (failures) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('all dashboard checks passed');
