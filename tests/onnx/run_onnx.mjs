// Scores a CSV file with an ONNX model in ONNX Runtime (onnxruntime-node, its
// bundled CPU library): the independent runtime that checks traind's
// exported models (worker/engine/onnx_export_test.cc).
//
//   node run_onnx.mjs MODEL.onnx INPUT.csv OUTPUT.csv
//
// INPUT.csv has a header row (RFC 4180 quoting allowed). Each model input is
// fed from the column of the same name, as an [N, 1] tensor of its type (the
// session's input metadata): float inputs parse the cell as a number (an
// empty, NA, NaN, nan or null cell is NaN), string inputs take the cell's
// text. OUTPUT.csv: "row" (0-based), "label" when the model has one, then
// the columns of the other outputs, named as the model's metadata
// "output_columns" says (<output>_<j> without it). Numbers are written in
// the shortest form that reads back as the same float.
import { readFileSync, writeFileSync } from 'node:fs';
import ort from 'onnxruntime-node';

function fail(message) {
  process.stderr.write(`run_onnx: ${message}\n`);
  process.exit(1);
}

// RFC 4180: fields separated by commas, quoted fields may hold commas,
// newlines and doubled quotes. Returns rows of strings.
function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let quoted = false;
  let i = 0;
  if (text.charCodeAt(0) === 0xfeff) i = 1;  // a byte-order mark
  for (; i < text.length; ++i) {
    const c = text[i];
    if (quoted) {
      if (c === '"') {
        if (text[i + 1] === '"') {
          field += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field += c;
      }
    } else if (c === '"' && field === '') {
      quoted = true;
    } else if (c === ',') {
      row.push(field);
      field = '';
    } else if (c === '\n' || c === '\r') {
      if (c === '\r' && text[i + 1] === '\n') ++i;
      row.push(field);
      rows.push(row);
      row = [];
      field = '';
    } else {
      field += c;
    }
  }
  if (quoted) fail('unterminated quoted field');
  if (field !== '' || row.length > 0) {
    row.push(field);
    rows.push(row);
  }
  return rows;
}

function csvField(s) {
  return /[",\n\r]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

const MISSING = new Set(['', 'NA', 'NaN', 'nan', 'null']);

function parseNumber(cell, column, line) {
  const s = cell.trim();
  if (MISSING.has(s)) return NaN;
  const v = Number(s);
  if (Number.isNaN(v)) fail(`line ${line}: column ${column}: not a number: ${JSON.stringify(cell)}`);
  return v;
}

// The model's metadata_props, read from the ModelProto's bytes (field 14,
// StringStringEntryProto {key = 1, value = 2}): onnxruntime-node does not
// expose them.
function metadataProps(bytes) {
  const props = {};
  const decoder = new TextDecoder();
  function varint(buf, pos) {
    let value = 0n;
    let shift = 0n;
    for (;;) {
      if (pos >= buf.length) throw new Error('truncated varint');
      const b = buf[pos++];
      value |= BigInt(b & 0x7f) << shift;
      if ((b & 0x80) === 0) return [value, pos];
      shift += 7n;
    }
  }
  function fields(buf, visit) {
    let pos = 0;
    while (pos < buf.length) {
      let key;
      [key, pos] = varint(buf, pos);
      const field = Number(key >> 3n);
      const wire = Number(key & 7n);
      if (wire === 0) {
        [, pos] = varint(buf, pos);
      } else if (wire === 1) {
        pos += 8;
      } else if (wire === 5) {
        pos += 4;
      } else if (wire === 2) {
        let len;
        [len, pos] = varint(buf, pos);
        const end = pos + Number(len);
        visit(field, buf.subarray(pos, end));
        pos = end;
      } else {
        throw new Error(`wire type ${wire}`);
      }
    }
  }
  try {
    fields(bytes, (field, body) => {
      if (field !== 14) return;
      let key = '';
      let value = '';
      fields(body, (f, b) => {
        if (f === 1) key = decoder.decode(b);
        if (f === 2) value = decoder.decode(b);
      });
      props[key] = value;
    });
  } catch (e) {
    return {};
  }
  return props;
}

async function main() {
  const [modelPath, inputPath, outputPath] = process.argv.slice(2);
  if (!outputPath) fail('usage: node run_onnx.mjs MODEL.onnx INPUT.csv OUTPUT.csv');
  const modelBytes = readFileSync(modelPath);
  const props = metadataProps(modelBytes);
  let outputColumns = {};
  if (props.output_columns) outputColumns = JSON.parse(props.output_columns);

  const rows = parseCsv(readFileSync(inputPath, 'utf8'));
  if (rows.length === 0) fail(`${inputPath}: no header row`);
  const header = rows[0];
  const data = rows.slice(1).filter((r) => !(r.length === 1 && r[0] === ''));
  const n = data.length;

  const session = await ort.InferenceSession.create(modelBytes);
  const feeds = {};
  session.inputNames.forEach((name, i) => {
    const meta = session.inputMetadata[i];
    const c = header.indexOf(name);
    if (c < 0) fail(`${inputPath}: no column ${JSON.stringify(name)} for the model input`);
    const cells = data.map((r) => (c < r.length ? r[c] : ''));
    if (meta.type === 'string') {
      feeds[name] = new ort.Tensor('string', cells, [n, 1]);
    } else if (meta.type === 'float32') {
      const values = Float32Array.from(cells, (cell, r) => parseNumber(cell, name, r + 2));
      feeds[name] = new ort.Tensor('float32', values, [n, 1]);
    } else {
      fail(`model input ${name}: unsupported type ${meta.type}`);
    }
  });
  const results = await session.run(feeds);

  const names = session.outputNames.filter((o) => o !== 'label');
  const hasLabel = session.outputNames.includes('label');
  const out = ['row'];
  if (hasLabel) out.push('label');
  const widths = [];
  for (const name of names) {
    const t = results[name];
    const width = t.dims.length > 1 ? t.dims[1] : 1;
    widths.push(width);
    for (let j = 0; j < width; ++j) {
      const columns = outputColumns[name];
      out.push(csvField(columns && columns.length === width ? columns[j] : `${name}_${j}`));
    }
  }
  const lines = [out.join(',')];
  for (let r = 0; r < n; ++r) {
    const line = [String(r)];
    if (hasLabel) line.push(csvField(String(results.label.data[r])));
    names.forEach((name, k) => {
      const values = results[name].data;
      for (let j = 0; j < widths[k]; ++j) line.push(String(values[r * widths[k] + j]));
    });
    lines.push(line.join(','));
  }
  writeFileSync(outputPath, lines.join('\n') + '\n');
}

main().catch((e) => fail(e && e.stack ? e.stack : String(e)));
