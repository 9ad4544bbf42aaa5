// qkv studio (share/studio/studio.js): the page of `qkv serve` (docs/studio.md). It talks to the
// server's JSON API only (/api/...), on the same origin; nothing is fetched from anywhere else.
// window.qkvStudio is the page's test harness (tests/studio/browser_test.py).
'use strict';

(function () {
// ---------------------------------------------------------------- errors first
const H = window.qkvStudio = { ready: false, errors: [] };
function reportError(msg) {
  H.errors.push(msg);
  const b = document.getElementById('banner');
  if (b) {
    b.hidden = false;
    const line = document.createElement('div');
    line.textContent = 'Studio error: ' + msg;
    b.appendChild(line);
  }
}
window.addEventListener('error', (e) => reportError(String(e.message) +
  (e.filename ? ' (' + String(e.filename).split('/').pop() + ':' + e.lineno + ')' : '')));
window.addEventListener('unhandledrejection', (e) => {
  const r = e.reason;
  reportError('unhandled rejection: ' + (r && r.message ? r.message : String(r)));
});

// ---------------------------------------------------------------- words, in both languages
// The Chinese is written for Chinese readers, not translated word for word; quotes are “”.
const WORDS = {
  en: {
    model: 'Model', tab_look: 'Look inside', tab_patch: 'Patch heads', tab_train: 'Training, live',
    input_label: 'Type a sentence', input_label_ids: 'Type token ids', or_example: 'or a held-out example',
    answer_title: "The model's answer", grid_title: 'Every head, on this input',
    ablate_mode: 'Removed heads output', mode_zero: 'zero', mode_mean: 'their mean', restore_all: 'Restore all',
    grid_hint: "Each square: a head's attention weights (rows: queries, columns: keys). Click a square to follow one query through it; the switch under it removes the head.",
    steps_title: 'One query, step by step', query_pick: 'Click a token to make it the query:',
    patch_title: 'Activation patching: which heads carry the answer?',
    patch_intro: "Run the model on a clean input and on a corrupted one of the same length. Then, one head at a time, put the head's output from the clean run into the corrupted run, and see how much of the answer comes back: the share of the logit difference logit(answer) − logit(wrong) that the head restores, (patched − corrupted) / (clean − corrupted).",
    clean: 'Clean input', corrupt: 'Corrupted input', position: 'Position', answer_tok: 'Answer',
    wrong_tok: 'Wrong answer', patch_run: 'Patch every head', train_title: 'Training, live',
    train_none: 'Start the studio with --run DIR (the run directory of a qkv train, with train.snapshot_every set) to follow a run as it trains: its loss curves and its heads as they form.',
    curves_title: 'Loss during training', snap_title: 'Heads forming', follow: 'follow the newest',
    snap_example: 'held-out example',
    hint_mask: 'Click a token to hide it behind [MASK]: the model fills it, and the loss scores the hidden token.',
    hint_decoder: 'A decoder reads left to right: each query sees the keys up to itself, and the last position predicts the next token.',
    hint_encoder: 'An encoder reads both ways: every query sees the whole input.',
    hint_ids: 'Token ids separated by spaces, each in [0, {v}).',
    ids_bad: 'Token ids are whole numbers separated by spaces; found “{x}”.',
    example_note: 'Held-out example {n}; type to replace it with your own input.',
    fills_at: '[MASK] at position {p}, the model fills:', next_title: 'The next token, after the input:',
    labels_title: 'The output at every position (green: right, red: wrong):',
    no_mask: 'No [MASK] in the input: type [MASK], or click a token to hide it, and the model fills it.',
    most_likely: 'Most likely: ',
    reads_back: 'What it predicts at every position, reading the whole input:',
    loss_line: 'loss <b>{loss}</b> over {n} scored position{s}, accuracy <b>{acc}</b>',
    loss_intact: ' (all heads: loss {loss}, accuracy {acc})',
    loss_none: 'No loss on this input: no position has a known answer.',
    heldout: 'Held-out, the first {n} test examples (as qkv ablate computes it): loss {a} → <b>{b}</b> ({d}), accuracy {x} → <b>{y}</b>',
    heldout_intact: 'Held-out, the first {n} test examples: loss <b>{a}</b>, accuracy <b>{x}</b>. Remove heads to see what they are worth.',
    heldout_off: 'Held-out metrics are off: they need the model’s data, {why}.',
    heldout_wait: 'Held-out metrics: computing…',
    sw_on: 'on', sw_off: 'removed', head: 'head', layer: 'layer',
    step_where: 'head {l}.{h}, the query at position {i}, “{t}”',
    intro_textbook: 'The textbook example: in 猫喜欢追逐老鼠 (“the cat likes to chase mice”), the query of 追 (“chase”) asks who chases, and what. Of this model’s heads, {h} answers most: it puts {p}% of 追’s weight on 猫, 老 and 鼠. Follow it — scores → softmax → weighted sum — with the model’s own numbers; click another head or token to follow those.',
    intro: 'Pick a head (a square on the left) and a query token: below is how the head computes that query’s output, with the model’s own numbers.',
    s1: 'The query vector q', s1_text: 'q = W_q x + b_q, {d} numbers (blue: positive, orange: negative).',
    s2: 'Every key k_j, and the scores s_j = q · k_j',
    s2_text: 'Multiply q and k_j number by number and add up: a large score means the key offers what the query asks for.',
    s3: 'The scale', s3_text: 'a_j = s_j × {scale} (1/√{d}): without it the scores grow with the width d, and the softmax saturates.',
    s3_custom: 'a_j = s_j × {scale}, the scale this layer was given (not 1/√{d}).',
    s4: 'The mask', s4_causal: 'A causal layer: keys after the query (j > {i}) are masked, a_j = −∞, so their weight is 0.',
    s4_self: 'No key is masked: every query sees every key.',
    s4_cross: 'Cross-attention: the queries come from the target, the keys from the source; no key is masked.',
    s5: 'The softmax', s5_text: 'w_j = exp(a_j − max a) / Σ_k exp(a_k − max a): positive weights that add up to 1 (Σ exp = {sum}).',
    s6: 'The weighted sum of the values', s6_text: 'z = Σ_j w_j v_j: each value vector v_j scaled by its weight, then added up ({dv} numbers).',
    z_label: 'z, the head’s output for this query',
    check: 'Check: these weights match the ones the layer computed to {a}, the output to {b} (the layer computes in float32; these numbers were recomputed in double).',
    check_removed: 'This head is removed: the layer passes on {what} instead of this z.',
    what_zero: 'zeros', what_mean: 'the head’s mean output',
    th_key: 'key', th_tok: 'token', th_k: 'k_j', th_s: 's_j = q·k_j', th_a: 'a_j', th_e: 'exp(a_j − max a)',
    th_w: 'w_j', th_wv: 'w_j v_j',
    p_summary: 'Metric: logit(“{a}”) − logit(“{w}”) at position {p}. Clean run {c} (p = {pc}), corrupted run {x} (p = {px}).',
    p_hint: 'Share of the difference each head restores (1: all of it, 0: none, negative: it pushes the other way). Click a head for its numbers.',
    p_detail: 'Patching head {h} alone: p(“{a}”) goes from {x} (corrupted) to {y} (the clean run has {c}); it restores {r} of the logit difference.',
    p_same: 'Both runs give the same logit difference: there is nothing to restore.',
    p_running: 'patching…', p_done: '{n} heads patched in {ms} ms',
    p_need: 'Type a clean and a corrupted input of the same length.',
    step_n: 'step {s}', snap_of: 'snapshot {i} of {n}',
    run_wait: 'Waiting for the run’s first evaluation (metrics.csv)…',
    legend: 'blue: training loss · orange: held-out loss · x: step',
    server_says: '', net_error: 'Cannot reach the studio’s server: {e}',
    foot: 'Last redraw {ms} ms after the keystroke (the server took {s} ms).',
    info: '{task}, {arch}, {l} attention layers × {h} heads, context {c}',
    removed_n: '{n} head{s} removed',
  },
  zh: {
    model: '模型', tab_look: '看注意力', tab_patch: '激活修补', tab_train: '看训练过程',
    input_label: '输入一句话', input_label_ids: '输入词元编号', or_example: '或者选一个留出集的例子',
    answer_title: '模型的回答', grid_title: '这句话上的每一个注意力头',
    ablate_mode: '去掉的头输出', mode_zero: '零', mode_mean: '它的平均输出', restore_all: '全部恢复',
    grid_hint: '每个方块是一个头的注意力权重：行是查询，列是键。点一下方块，就能跟着一个查询一步一步看这个头怎么算；方块下面的开关可以把这个头去掉。',
    steps_title: '一个查询，一步一步算', query_pick: '点一个词元，让它来当查询：',
    patch_title: '激活修补：答案是哪些头带过来的？',
    patch_intro: '先让模型分别读一个“干净”的输入和一个“损坏”的输入，两个一样长。然后每次只挑一个头，把它在干净输入上的输出，换进损坏输入的那次运行里，看答案能找回多少：用 logit(正确答案) − logit(错误答案) 这个差来衡量，找回的比例是 (修补后 − 损坏) / (干净 − 损坏)。',
    clean: '干净的输入', corrupt: '损坏的输入', position: '位置', answer_tok: '正确答案',
    wrong_tok: '错误答案', patch_run: '逐个修补所有的头', train_title: '看训练过程',
    train_none: '启动时加上 --run 目录（qkv train 的输出目录，训练时设置了 train.snapshot_every），就能一边训练一边看：损失曲线，还有注意力头是怎么一点点形成的。',
    curves_title: '训练中的损失', snap_title: '注意力头的形成', follow: '跟着最新的',
    snap_example: '留出集例子',
    hint_mask: '点一个字，把它遮成 [MASK]：模型会来填，损失就按被遮住的那个字算。',
    hint_decoder: '解码器从左往右读：每个查询只能看到它自己和前面的键，最后一个位置预测下一个词元。',
    hint_encoder: '编码器两个方向都能看：每个查询都能看到整个输入。',
    hint_ids: '用空格隔开的词元编号，每个都在 [0, {v}) 之间。',
    ids_bad: '词元编号应该是用空格隔开的整数，这里有“{x}”。',
    example_note: '这是留出集的第 {n} 个例子；直接输入就能换成你自己的。',
    fills_at: '第 {p} 个位置的 [MASK]，模型会填：', next_title: '接下来的词元，模型猜：',
    labels_title: '每个位置的输出（绿色是对的，红色是错的）：',
    no_mask: '输入里没有 [MASK]：打一个 [MASK]，或者点一个字把它遮住，模型就会来填。',
    most_likely: '最可能是：',
    reads_back: '看着整句话，模型在每个位置上猜的字：',
    loss_line: '损失 <b>{loss}</b>（按 {n} 个有答案的位置算），准确率 <b>{acc}</b>',
    loss_intact: '（所有头都在时：损失 {loss}，准确率 {acc}）',
    loss_none: '这个输入上没有损失可算：没有哪个位置的答案是已知的。',
    heldout: '留出集前 {n} 个测试例子（和 qkv ablate 的算法一样）：损失 {a} → <b>{b}</b>（{d}），准确率 {x} → <b>{y}</b>',
    heldout_intact: '留出集前 {n} 个测试例子：损失 <b>{a}</b>，准确率 <b>{x}</b>。去掉几个头，看看它们值多少。',
    heldout_off: '留出集指标用不了：需要模型的数据，{why}。',
    heldout_wait: '留出集指标：正在算……',
    sw_on: '开着', sw_off: '已去掉', head: '头', layer: '层',
    step_where: '头 {l}.{h}，查询是位置 {i} 上的“{t}”',
    intro_textbook: '课本上的例子：“猫喜欢追逐老鼠”里，“追”的查询在问：谁在追？追的是什么？这个模型的所有头里，{h} 回答得最明白：“追”的权重有 {p}% 落在“猫”“老”“鼠”上。下面就用模型自己的数字跟着它走一遍：打分 → softmax → 加权求和。点别的头或者别的字，就换成跟着它们走。',
    intro: '在左边选一个头（一个方块），再选一个查询词元：下面就是这个头怎么算出这个查询的输出，用的都是模型自己的数字。',
    s1: '查询向量 q', s1_text: 'q = W_q x + b_q，一共 {d} 个数（蓝色是正数，橙色是负数）。',
    s2: '每个键向量 k_j，和打分 s_j = q · k_j',
    s2_text: '把 q 和 k_j 对应的数相乘，再全部加起来：分数越高，说明这个键越能提供查询要找的东西。',
    s3: '缩放', s3_text: 'a_j = s_j × {scale}（也就是 1/√{d}）：不缩放的话，分数会随着维度 d 变大，softmax 就饱和了。',
    s3_custom: 'a_j = s_j × {scale}，这是这一层设定的缩放（不是 1/√{d}）。',
    s4: '掩码', s4_causal: '因果注意力：查询后面的键（j > {i}）被遮住，a_j = −∞，所以权重是 0。',
    s4_self: '没有键被遮住：每个查询都能看到所有的键。',
    s4_cross: '交叉注意力：查询来自目标序列，键来自源序列；没有键被遮住。',
    s5: 'softmax', s5_text: 'w_j = exp(a_j − max a) / Σ_k exp(a_k − max a)：权重都是正的，加起来等于 1（Σ exp = {sum}）。',
    s6: '对值向量加权求和', s6_text: 'z = Σ_j w_j v_j：每个值向量 v_j 乘上自己的权重，再加起来（一共 {dv} 个数）。',
    z_label: 'z：这个头对这个查询的输出',
    check: '核对：这里的权重和这一层自己算的相差不到 {a}，输出相差不到 {b}（这一层用 float32 算，这里的数字用 double 重算）。',
    check_removed: '这个头已经被去掉了：这一层往后传的是{what}，不是这里的 z。',
    what_zero: '零', what_mean: '这个头的平均输出',
    th_key: '键', th_tok: '词元', th_k: 'k_j', th_s: 's_j = q·k_j', th_a: 'a_j', th_e: 'exp(a_j − max a)',
    th_w: 'w_j', th_wv: 'w_j v_j',
    p_summary: '指标：第 {p} 个位置上的 logit(“{a}”) − logit(“{w}”)。干净输入 {c}（p = {pc}），损坏输入 {x}（p = {px}）。',
    p_hint: '每个头找回的比例（1 是全部找回，0 是一点没有，负数是往反方向推）。点一个头看它的数字。',
    p_detail: '只修补 {h} 这一个头：p(“{a}”) 从 {x}（损坏输入）变成 {y}（干净输入是 {c}），找回了 logit 差的 {r}。',
    p_same: '两次运行的 logit 差一样：没有可以找回的。',
    p_running: '正在修补……', p_done: '修补了 {n} 个头，用时 {ms} 毫秒',
    p_need: '请输入一样长的干净输入和损坏输入。',
    step_n: '第 {s} 步', snap_of: '第 {i} 个快照，共 {n} 个',
    run_wait: '正在等这次训练的第一次评估（metrics.csv）……',
    legend: '蓝色：训练损失 · 橙色：留出集损失 · 横轴：训练步数',
    server_says: '服务器说：', net_error: '连不上 studio 的服务器：{e}',
    foot: '按键之后 {ms} 毫秒重画完（其中服务器用了 {s} 毫秒）。',
    info: '{task}，{arch}，{l} 层注意力 × {h} 个头，上下文 {c}',
    removed_n: '去掉了 {n} 个头',
  },
};

const S = {
  lang: 'en', tab: 'look', models: [], run: false, mi: 0, info: null,
  input: { mode: 'text', text: '', example: 0 }, masks: [], ablated: [], mode: 'zero',
  sel: { layer: 0, head: 0, query: 0 }, textbook: false,
  seq: 0, want: null, inflight: false, pending: false, drawnSeq: 0, result: null, inputError: '',
  explain: null, explainSeq: 0, heldout: null, heldoutSeq: 0, heldoutNote: '',
  timings: { latency: null, server: null, history: [] },
  patch: { seq: 0, result: null, error: '', sel: null },
  runInfo: null, runVersion: null, snap: null, snapIndex: -1, snapSeq: 0, curves: null,
};

const $ = (id) => document.getElementById(id);
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text != null) e.textContent = text;
  return e;
}
function t(key, args) {
  const table = WORDS[S.lang] && key in WORDS[S.lang] ? WORDS[S.lang] : WORDS.en;
  let s = key in table ? table[key] : key;
  if (args) for (const k of Object.keys(args)) s = s.split('{' + k + '}').join(String(args[k]));
  return s;
}
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' }[c]));
const fmt = (x, d = 4) => (x == null || !isFinite(x) ? '–' : Number(x).toFixed(d));
const pct = (x) => (x == null || !isFinite(x) ? '–' : (100 * x).toFixed(2) + '%');
const signed = (x, d = 4) => (x == null || !isFinite(x) ? '–' : (x >= 0 ? '+' : '−') + Math.abs(x).toFixed(d));
function shown(tok) { return tok === ' ' ? '␣' : tok === '\n' ? '⏎' : tok === '\t' ? '⇥' : tok; }

// ---------------------------------------------------------------- the server
async function api(path, body) {
  const opts = body === undefined ? {} : {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) };
  const t0 = performance.now();
  let r, text;
  try {
    r = await fetch(path, opts);
    text = await r.text();
  } catch (e) {
    return { ok: false, status: 0, error: t('net_error', { e: e.message }) };
  }
  const t1 = performance.now();
  let data = null;
  try { data = JSON.parse(text); } catch (e) { data = null; }
  const phases = { request_ms: t1 - t0, parse_ms: performance.now() - t1, bytes: text.length };
  if (!r.ok) return { ok: false, status: r.status, error: (data && data.error) || ('HTTP ' + r.status), phases };
  return { ok: true, status: r.status, data, phases };
}

// ---------------------------------------------------------------- colours and drawing
// viridis at 0, 0.1, ..., 1 (matplotlib), as the viewer draws weights.
const VIRIDIS = [[68, 1, 84], [72, 36, 117], [65, 68, 135], [53, 95, 141], [42, 120, 142], [33, 145, 140],
  [34, 168, 132], [68, 191, 112], [122, 209, 81], [189, 223, 38], [253, 231, 37]];
const LUT = (() => {
  const lut = new Uint32Array(256);
  for (let b = 0; b < 256; b++) {
    const x = b / 255 * (VIRIDIS.length - 1), k = Math.min(VIRIDIS.length - 2, Math.floor(x)), f = x - k;
    const c = [0, 1, 2].map((m) => Math.round(VIRIDIS[k][m] + f * (VIRIDIS[k + 1][m] - VIRIDIS[k][m])));
    lut[b] = ((255 << 24) | (c[2] << 16) | (c[1] << 8) | c[0]) >>> 0;
  }
  return lut;
})();
const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
function floats(b64) {  // base64 of little-endian float32 -> Float32Array
  const bin = atob(b64), n = bin.length;
  const bytes = new Uint8Array(n);
  for (let i = 0; i < n; i++) bytes[i] = bin.charCodeAt(i);
  if (LITTLE) return new Float32Array(bytes.buffer);
  const dv = new DataView(bytes.buffer), out = new Float32Array(n / 4);
  for (let i = 0; i < out.length; i++) out[i] = dv.getFloat32(4 * i, true);
  return out;
}
function bytes(b64) {  // base64 of round(255 w) -> Uint8Array
  const bin = atob(b64), n = bin.length, out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
  return out;
}
// A layer's weights of head h as numbers in [0, 1] (uint8 rows are divided by 255).
function headWeights(layer, h) {
  if (layer.encoding !== 'uint8') return floats(layer.weights[h]);
  const b = bytes(layer.weights[h]), w = new Float32Array(b.length);
  for (let i = 0; i < b.length; i++) w[i] = b[i] / 255;
  return w;
}
function paintBytes(canvas, b, rows, cols) {  // bytes round(255 w) (rows x cols) onto a canvas of that size
  if (canvas.width !== cols) canvas.width = cols;
  if (canvas.height !== rows) canvas.height = rows;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(cols, rows), px = new Uint32Array(img.data.buffer);
  for (let i = 0; i < rows * cols; i++) px[i] = LUT[b[i]];
  ctx.putImageData(img, 0, 0);
}
function paint(canvas, w, rows, cols) {  // weights (rows x cols) in [0, 1] onto a canvas of that size
  if (canvas.width !== cols) canvas.width = cols;
  if (canvas.height !== rows) canvas.height = rows;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(cols, rows), px = new Uint32Array(img.data.buffer);
  for (let i = 0; i < rows * cols; i++) px[i] = LUT[Math.max(0, Math.min(255, Math.round(255 * w[i])))];
  ctx.putImageData(img, 0, 0);
}
// A bar for each value (blue positive, orange negative), on a canvas of CSS size w x h; `later`
// (a list) defers the drawing: the step-by-step table draws its many small bars in batches.
function bars(values, w, h, max, later) {
  const c = el('canvas', 'vec');
  const dpr = window.devicePixelRatio || 1;
  c.width = Math.round(w * dpr), c.height = Math.round(h * dpr);
  c.style.width = w + 'px', c.style.height = h + 'px';
  const draw = () => {
    const ctx = c.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const n = values.length;
    let m = max;
    if (!m) { m = 1e-12; for (const v of values) m = Math.max(m, Math.abs(v)); }
    const bw = w / n, mid = h / 2;
    ctx.fillStyle = '#dfe4ea';
    ctx.fillRect(0, mid - 0.5, w, 1);
    for (let i = 0; i < n; i++) {
      const v = values[i] / m, bh = Math.max(0.5, Math.abs(v) * (mid - 1));
      ctx.fillStyle = v >= 0 ? '#2563eb' : '#ea7a3b';
      ctx.fillRect(i * bw + (bw > 3 ? 0.5 : 0), v >= 0 ? mid - bh : mid, Math.max(1, bw - (bw > 3 ? 1 : 0)), bh);
    }
  };
  if (later) later.push(draw); else draw();
  return c;
}
// Run the deferred drawings a batch per task, so that a keystroke is never kept waiting behind
// them; a newer rendering (token changed) abandons the rest.
function drawLater(jobs, token) {
  const batch = () => {
    if (S.stepsToken !== token) return;
    const end = performance.now() + 6;
    while (jobs.length && performance.now() < end) jobs.shift()();
    if (jobs.length) setTimeout(batch, 0);
  };
  setTimeout(batch, 0);
}

// ---------------------------------------------------------------- language and tabs
function applyLang(lang) {
  S.lang = lang === 'zh' ? 'zh' : 'en';
  document.documentElement.lang = S.lang === 'zh' ? 'zh-CN' : 'en';
  try { localStorage.setItem('qkv-studio-lang', S.lang); } catch (e) { /* private mode */ }
  for (const b of document.querySelectorAll('#langs button')) b.setAttribute('aria-pressed', String(b.dataset.lang === S.lang));
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(e.dataset.i18n);
  renderAll();
}
function applyTab(tab) {
  S.tab = tab;
  for (const b of document.querySelectorAll('#tabs button')) b.setAttribute('aria-pressed', String(b.dataset.tab === tab));
  $('view-look').hidden = tab !== 'look';
  $('view-patch').hidden = tab !== 'patch';
  $('view-train').hidden = tab !== 'train';
  if (tab === 'patch' && !S.patch.result && !S.patch.error) runPatch();
  if (tab === 'train') renderTrain();
}
function renderAll() {
  renderInfo();
  renderInputChrome();
  if (S.result) { renderTokens(); renderGrid(); renderAnswer(); }
  renderHeldout();
  renderSteps();
  renderPatch();
  renderTrain();
  renderFoot();
}

// ---------------------------------------------------------------- models
async function loadModels() {
  const r = await api('/api/models');
  if (!r.ok) { showInputError(r.error); H.ready = true; return; }
  S.models = r.data.models;
  S.run = r.data.run;
  const sel = $('model');
  sel.textContent = '';
  S.models.forEach((m, i) => {  // the run's folder and the file name; the whole path on hover
    const o = sel.appendChild(el('option', null, m.path.split('/').slice(-2).join('/') + ' (' + m.task + ')'));
    o.value = String(i);
    o.title = m.path;
  });
  sel.disabled = S.models.length < 2;
  chooseModel(0);
  if (S.run) pollRun();
}
function chooseModel(i) {
  S.mi = i;
  S.info = S.models[i];
  $('model').value = String(i);
  const info = S.info, sug = info.suggestion || {};
  S.masks = [], S.ablated = [], S.explain = null, S.result = null, S.heldout = null, S.textbookHead = null;
  S.patch.result = null, S.patch.error = '', S.patch.sel = null;
  if (sug.text != null) {
    S.input = { mode: 'text', text: sug.text, example: 0 };
    S.textbook = sug.text === '猫喜欢追逐老鼠';
  } else if (sug.example != null) {
    S.input = { mode: 'example', text: '', example: sug.example };
    S.textbook = false;
  } else {
    S.input = { mode: info.text ? 'text' : 'ids', text: '', example: 0 };
    S.textbook = false;
  }
  S.sel = { layer: 0, head: 0, query: sug.query || 0 };
  const ps = info.patch || {};
  $('clean').value = ps.clean || '';
  $('corrupt').value = ps.corrupt || '';
  $('p-position').value = '', $('p-answer').value = ps.answer || '', $('p-wrong').value = ps.wrong || '';
  $('text').value = S.input.mode === 'example' ? '' : S.input.text;
  $('example').value = String(S.input.example);
  $('example').max = String(Math.max(0, info.examples - 1));
  renderInfo();
  renderInputChrome();
  analyze(performance.now());
  heldout();
  if (S.tab === 'patch') runPatch();
}
function renderInfo() {
  const info = S.info;
  if (!info) return;
  const heads = info.layers.length ? info.layers[0].heads : 0;
  $('model-info').textContent = t('info', { task: info.task, arch: info.arch, l: info.layers.length, h: heads, c: info.context });
}

// ---------------------------------------------------------------- the input
function idsMode() { return S.info && !S.info.text; }
function renderInputChrome() {
  const info = S.info;
  if (!info) return;
  $('input-label').textContent = t(idsMode() ? 'input_label_ids' : 'input_label');
  $('example-box').hidden = !info.with_data;
  let hint = '';
  if (idsMode()) hint = t('hint_ids', { v: info.input_vocab });
  $('input-hint').textContent = hint;
  $('tokens-hint').textContent = info.mask_text ? t('hint_mask')
    : info.objective === 'causal' ? t('hint_decoder') : info.arch === 'encoder' ? t('hint_encoder') : '';
  const note = S.input.mode === 'example' ? t('example_note', { n: S.input.example })
    : S.result && S.result.note ? S.result.note : '';
  $('input-note').hidden = !note;
  $('input-note').textContent = note;
}
function showInputError(msg) {
  S.inputError = msg || '';
  $('input-error').hidden = !S.inputError;
  $('input-error').textContent = S.inputError ? t('server_says') + S.inputError : '';
}
function inputBody() {
  if (S.input.mode === 'example') return { example: S.input.example };
  if (S.input.mode === 'ids') {
    const parts = S.input.text.split(/[\s,]+/).filter((x) => x);
    for (const p of parts) if (!/^\d+$/.test(p)) throw new Error(t('ids_bad', { x: p }));
    const body = { ids: parts.map(Number) };
    if (S.masks.length) body.masks = S.masks.slice();
    return body;
  }
  const body = { text: S.input.text };
  if (S.masks.length) body.masks = S.masks.slice();
  return body;
}
function ablateBody() { return S.ablated.length ? { heads: S.ablated.map((x) => x.slice()), mode: S.mode } : undefined; }

// A keystroke (or any change) asks for a new analysis; while one is in flight, only the newest
// waiting change is sent after it: the page never queues stale inputs.
function analyze(t0) {
  clearTimeout(S.explainTimer);
  S.want = { seq: ++S.seq, t0 };
  if (S.inflight) { S.pending = true; return; }
  runAnalyze();
}
async function runAnalyze() {
  const req = S.want;
  let input;
  try { input = inputBody(); } catch (e) { showInputError(e.message); S.drawnSeq = req.seq; return; }
  if (input.text !== undefined && !input.text.trim() || input.ids !== undefined && !input.ids.length) {
    showInputError('');  // nothing typed yet: nothing to ask
    S.drawnSeq = Math.max(S.drawnSeq, req.seq);
    return;
  }
  S.inflight = true;
  const body = { model: S.mi, input, top_k: 5, weights: 'uint8' };
  const ab = ablateBody();
  if (ab) body.ablate = ab;
  const r = await api('/api/analyze', body);
  S.inflight = false;
  if (r.ok) {
    showInputError('');
    S.result = r.data;
    S.result.seq = req.seq;
    S.result.input = input;  // what explain() asks about: the input these tokens are of
    S.timings.server = r.data.ms;
    const td = performance.now();
    const T = r.data.tokens.length;
    S.masks = S.masks.filter((p) => p < T);
    if (S.textbook && !S.textbookHead) pickTextbookHead();
    renderTokens();
    renderGrid();
    renderAnswer();
    renderInputChrome();
    S.timings.phases = Object.assign({ draw_ms: performance.now() - td, server_ms: r.data.ms }, r.phases);
    requestAnimationFrame(() => {
      const ms = performance.now() - req.t0;
      S.timings.latency = ms;
      S.timings.history.push(ms);
      if (S.timings.history.length > 200) S.timings.history.shift();
      S.drawnSeq = Math.max(S.drawnSeq, req.seq);
      renderFoot();
    });
    // The explanation follows once typing pauses: a newer input's analysis cancels it, so the grid
    // is never kept waiting behind the step-by-step view.
    clearTimeout(S.explainTimer);
    if (!S.pending) S.explainTimer = setTimeout(explain, 120);
  } else {
    showInputError(r.error);
    S.drawnSeq = Math.max(S.drawnSeq, req.seq);
  }
  if (S.pending) { S.pending = false; runAnalyze(); }
}

function renderTokens() {
  const box = $('tokens');
  box.textContent = '';
  const R = S.result;
  if (!R) return;
  const maskable = !!(S.info && S.info.mask_text) && S.input.mode !== 'example';
  R.tokens.forEach((tok, i) => {
    const masked = S.masks.includes(i);
    const c = el('span', 'tok' + (maskable ? ' click' : '') + (masked || tok === '[MASK]' ? ' masked' : ''));
    c.dataset.i = i;
    c.appendChild(el('span', null, shown(tok)));
    if (masked) {
      const pos = R.answer.positions[i];
      if (pos && pos.target_token != null) c.appendChild(el('span', 'orig', '(' + pos.target_token + ')'));
    }
    c.appendChild(el('span', 'i', String(i)));
    if (maskable && (masked || tok !== '[MASK]'))
      c.addEventListener('click', () => {
        S.masks = masked ? S.masks.filter((p) => p !== i) : S.masks.concat([i]).sort((a, b) => a - b);
        analyze(performance.now());
      });
    box.appendChild(c);
  });
}

// ---------------------------------------------------------------- the grid of heads
function isAblated(l, h) { return S.ablated.some((x) => x[0] === l && x[1] === h); }
function renderGrid() {
  const R = S.result, grid = $('grid');
  if (!R) return;
  const L = R.layers.length, Hn = Math.max(...R.layers.map((x) => x.weights.length));
  grid.style.gridTemplateColumns = `18px repeat(${Hn}, auto)`;
  const want = 1 + Hn + L * (1 + Hn);
  if (grid.children.length !== want || grid.dataset.shape !== L + 'x' + Hn) {
    grid.textContent = '';
    grid.dataset.shape = L + 'x' + Hn;
    grid.appendChild(el('div'));
    for (let h = 0; h < Hn; h++) grid.appendChild(el('div', 'hcol', String(h)));
    for (let l = 0; l < L; l++) {
      grid.appendChild(el('div', 'lhead', R.layers[l].name));
      for (let h = 0; h < Hn; h++) {
        const cell = el('div', 'cell');
        cell.dataset.layer = l, cell.dataset.head = h;
        const cv = el('canvas');
        cv.addEventListener('click', () => selectHead(l, h));
        cell.appendChild(cv);
        const cap = el('div', 'cap');
        cap.appendChild(el('span', 'hn', l + '.' + h));
        const sw = el('button', 'sw');
        sw.type = 'button';
        sw.addEventListener('click', () => toggleHead(l, h));
        cap.appendChild(sw);
        cell.appendChild(cap);
        grid.appendChild(cell);
      }
    }
  }
  for (const cell of grid.querySelectorAll('.cell')) {
    const l = +cell.dataset.layer, h = +cell.dataset.head, layer = R.layers[l];
    const off = isAblated(l, h);
    cell.classList.toggle('off', off);
    cell.classList.toggle('sel', S.sel.layer === l && S.sel.head === h);
    const sw = cell.querySelector('.sw');
    sw.setAttribute('aria-pressed', String(off));
    sw.textContent = off ? t('sw_off') : t('sw_on');
    sw.title = (off ? '↺ ' : '✕ ') + l + '.' + h;
    if (h >= layer.weights.length) { cell.style.visibility = 'hidden'; continue; }
    const cv = cell.querySelector('canvas');
    if (layer.encoding === 'uint8') paintBytes(cv, bytes(layer.weights[h]), layer.query_tokens.length, layer.key_tokens.length);
    else paint(cv, floats(layer.weights[h]), layer.query_tokens.length, layer.key_tokens.length);
    cell.querySelector('canvas').title = layer.name + ' ' + t('head') + ' ' + h;
  }
  $('restore').disabled = S.ablated.length === 0;
}
// The textbook's question, asked of this model: of all heads, which one's query 追 puts the most
// weight on 猫 (the chaser) and 老鼠 (the chased)? The walk-through starts there.
function pickTextbookHead() {
  const R = S.result, q = 3, keys = [0, 5, 6];
  if (R.tokens.slice(0, 7).join('') !== '猫喜欢追逐老鼠') return;
  let best = null;
  R.layers.forEach((layer, l) => layer.weights.forEach((b64, h) => {
    const w = headWeights(layer, h), Tk = layer.key_tokens.length;
    if (layer.query_tokens.length <= q) return;
    const share = keys.reduce((a, j) => a + (j < Tk ? w[q * Tk + j] : 0), 0);
    if (!best || share > best.share) best = { l, h, share };
  }));
  if (!best) return;
  S.sel = { layer: best.l, head: best.h, query: q };
  S.textbookHead = best;
}
function selectHead(l, h) {
  S.sel.layer = l, S.sel.head = h;
  S.textbook = false;
  renderGrid();
  explain();
}
function selectQuery(i) {
  S.sel.query = i;
  S.textbook = false;
  explain();
}
function toggleHead(l, h) {
  S.ablated = isAblated(l, h) ? S.ablated.filter((x) => !(x[0] === l && x[1] === h)) : S.ablated.concat([[l, h]]);
  analyze(performance.now());
  heldout();
}

// ---------------------------------------------------------------- the answer
function candList(top, truth) {
  const box = el('div', 'cands');
  const max = Math.max(1e-9, ...top.map((c) => c.p));
  for (const c of top) {
    const row = el('div', 'cand' + (truth != null && c.id === truth ? ' truth' : ''));
    row.appendChild(el('span', 't', shown(c.token)));
    const b = el('span', 'b'), fill = el('span');
    fill.style.width = (100 * c.p / max).toFixed(1) + '%';
    b.appendChild(fill);
    row.appendChild(b);
    row.appendChild(el('span', 'p', c.p.toFixed(4)));
    box.appendChild(row);
  }
  return box;
}
function renderAnswer() {
  const R = S.result, box = $('answer');
  box.textContent = '';
  if (!R) return;
  const A = R.answer;
  const outputs = () => {
    const row = el('div', 'outrow');
    for (const p of A.positions) {
      const o = el('span', 'out' + (p.right === true ? ' right' : p.right === false ? ' wrong' : ''));
      o.appendChild(el('span', null, shown(p.token)));
      o.appendChild(el('span', 'pp', p.p.toFixed(2)));
      o.title = 'position ' + p.position + (p.target_token != null ? ', target ' + p.target_token : '');
      row.appendChild(o);
    }
    return row;
  };
  if (A.kind === 'fill') {
    if (!A.fills.length) {
      box.appendChild(el('div', 'muted', t('no_mask')));
      box.appendChild(el('div', 'where muted small', t('reads_back')));
      box.appendChild(outputs());
    }
    for (const f of A.fills) {
      const d = el('div', 'fill');
      d.dataset.position = f.position;
      d.appendChild(el('div', 'where', t('fills_at', { p: f.position })));
      const pos = A.positions[f.position];
      d.appendChild(candList(f.top, pos && pos.target != null ? pos.target : null));
      box.appendChild(d);
    }
    if (A.fills.length) {
      const line = R.tokens.map((tok, i) => {
        const f = A.fills.find((x) => x.position === i);
        return f ? f.top[0].token : tok;
      });
      box.appendChild(el('div', 'mostlikely', t('most_likely') + line.join(S.info.tokenizer === 'word' ? ' ' : '')));
    }
  } else if (A.kind === 'next') {
    box.appendChild(el('div', 'where muted small', t('next_title')));
    box.appendChild(candList(A.next.top, null));
  } else {
    box.appendChild(el('div', 'where muted small', t('labels_title')));
    box.appendChild(outputs());
  }
  const loss = $('loss');
  if (R.loss == null) {
    loss.textContent = t('loss_none');
  } else {
    let html = t('loss_line', { loss: fmt(R.loss), n: R.scored, s: R.scored === 1 ? '' : 's', acc: pct(R.token_accuracy) });
    if (R.intact) html += t('loss_intact', { loss: fmt(R.intact.loss), acc: pct(R.intact.token_accuracy) });
    loss.innerHTML = html;
  }
  loss.dataset.loss = R.loss == null ? '' : String(R.loss);
}

// ---------------------------------------------------------------- held-out metrics
async function heldout() {
  const info = S.info;
  if (!info) return;
  if (!info.with_data) { S.heldout = null; S.heldoutNote = t('heldout_off', { why: info.data_note }); renderHeldout(); return; }
  const seq = ++S.heldoutSeq;
  S.heldoutNote = t('heldout_wait');
  renderHeldout();
  const body = { model: S.mi, examples: Math.min(64, info.test_examples) };
  const ab = ablateBody();
  if (ab) body.ablate = ab;
  const r = await api('/api/heldout', body);
  if (seq !== S.heldoutSeq) return;
  S.heldout = r.ok ? r.data : null;
  S.heldoutNote = r.ok ? '' : t('server_says') + r.error;
  renderHeldout();
}
function renderHeldout() {
  const box = $('heldout');
  const d = S.heldout;
  if (!d) { box.textContent = S.heldoutNote || ''; box.dataset.loss = ''; return; }
  if (d.ablated) {
    const a = d.intact, b = d.ablated, dl = b.loss - a.loss;
    box.innerHTML = t('heldout', { n: d.examples, a: fmt(a.loss), b: fmt(b.loss),
      d: '<span class="' + (dl > 0 ? 'up' : 'down') + '">' + signed(dl) + '</span>',
      x: pct(a.token_accuracy), y: pct(b.token_accuracy) });
    box.dataset.loss = String(b.loss);
    box.dataset.accuracy = String(b.token_accuracy);
  } else {
    box.innerHTML = t('heldout_intact', { n: d.examples, a: fmt(d.intact.loss), x: pct(d.intact.token_accuracy) });
    box.dataset.loss = String(d.intact.loss);
    box.dataset.accuracy = String(d.intact.token_accuracy);
  }
  box.dataset.heads = (d.ablated ? d.ablated.heads : []).map((x) => x.join('.')).join(',');
  box.dataset.mode = d.mode;
}

// ---------------------------------------------------------------- one query, step by step
async function explain() {
  const R = S.result;
  if (!R) return;
  const layer = R.layers[S.sel.layer];
  if (!layer) return;
  if (S.sel.head >= layer.weights.length) S.sel.head = 0;
  // The query chosen stays chosen while the input is shorter (as it is while a sentence is typed).
  const query = Math.min(S.sel.query, layer.query_tokens.length - 1);
  const input = R.input;
  const seq = ++S.explainSeq;
  const body = { model: S.mi, input, query: { layer: S.sel.layer, head: S.sel.head, position: query } };
  const ab = ablateBody();
  if (ab) body.ablate = ab;
  const r = await api('/api/explain', body);
  if (seq !== S.explainSeq) return;
  S.explain = r.ok ? r.data.explain : null;
  if (S.explain) S.explain.seq = seq, S.explain.forSeq = R.seq;
  if (!r.ok) showInputError(r.error);
  const ts = performance.now();
  renderSteps();
  S.timings.steps_ms = performance.now() - ts;
  if (!H.ready) H.ready = true;
}
function cellText(tr, text, value, cls) {
  const td = el('td', cls || null, text);
  if (value !== undefined) td.dataset.v = String(value);
  tr.appendChild(td);
  return td;
}
function renderSteps() {
  const E = S.explain, body = $('step-body'), qbox = $('queries');
  const token = S.stepsToken = (S.stepsToken || 0) + 1, later = [];
  body.textContent = '', qbox.textContent = '';
  const tb = S.textbookHead;
  $('step-intro').textContent = S.textbook && tb && E && E.layer_index === tb.l && E.head === tb.h && E.query === 3
    ? t('intro_textbook', { h: tb.l + '.' + tb.h, p: (100 * tb.share).toFixed(0) }) : t('intro');
  if (!E) { $('step-where').textContent = ''; return; }
  $('step-where').textContent = t('step_where', { l: E.layer_index, h: E.head, i: E.query, t: shown(E.query_tokens[E.query]) });
  E.query_tokens.forEach((tok, i) => {
    const c = el('span', 'tok click' + (i === E.query ? ' on' : ''));
    c.dataset.i = i;
    c.appendChild(el('span', null, shown(tok)));
    c.appendChild(el('span', 'i', String(i)));
    c.addEventListener('click', () => selectQuery(i));
    qbox.appendChild(c);
  });
  const D = E.q.length, Dv = E.output.length;
  const step = (n, title, text) => {
    const s = el('div', 'step');
    s.dataset.step = n;
    const h = el('h3');
    h.appendChild(el('span', 'n', String(n)));
    h.appendChild(document.createTextNode(title));
    s.appendChild(h);
    if (text) s.appendChild(el('div', 'muted small', text));
    body.appendChild(s);
    return s;
  };
  // 1. q
  const s1 = step(1, t('s1'), t('s1_text', { d: D }));
  let qmax = 1e-12;
  for (const x of E.q) qmax = Math.max(qmax, Math.abs(x));
  for (const k of E.keys) for (const x of k.k) qmax = Math.max(qmax, Math.abs(x));
  s1.appendChild(bars(E.q, Math.min(520, Math.max(160, 8 * D)), 40, qmax));
  s1.appendChild(el('div', 'formula', '|q| = ' + Math.hypot(...E.q).toFixed(4)));
  // 2-5: one table of the keys: k_j, s_j, a_j, exp, w_j, w_j v_j
  step(2, t('s2'), t('s2_text'));
  const custom = Math.abs(E.scale - 1 / Math.sqrt(D)) > 1e-12;
  step(3, t('s3'), t(custom ? 's3_custom' : 's3_text', { scale: E.scale.toFixed(6), d: D }));
  step(4, t('s4'), E.kind === 'causal' ? t('s4_causal', { i: E.query }) : E.kind === 'cross' ? t('s4_cross') : t('s4_self'));
  const live = E.keys.filter((k) => !k.masked);
  const amax = Math.max(...live.map((k) => k.scaled));
  const expo = E.keys.map((k) => (k.masked ? 0 : Math.exp(k.scaled - amax)));
  const sum = expo.reduce((a, b) => a + b, 0);
  const s5 = step(5, t('s5'), t('s5_text', { sum: sum.toFixed(4) }));
  const wrap = el('div', 'tablewrap');
  const table = el('table', 'kt');
  const head = el('tr');
  for (const k of ['th_key', 'th_tok', 'th_k', 'th_s', 'th_a', 'th_e', 'th_w', '', 'th_wv']) head.appendChild(el('th', null, k ? t(k) : ''));
  const thead = el('thead');
  thead.appendChild(head);
  table.appendChild(thead);
  const tbody = el('tbody');
  const wmax = Math.max(1e-12, ...live.map((k) => k.weight));
  const top = live.length ? live.reduce((a, b) => (b.weight > a.weight ? b : a)) : null;
  const wv = E.keys.map((k) => k.v.map((x) => x * k.weight));
  let vmax = 1e-12;
  for (const v of wv) for (const x of v) vmax = Math.max(vmax, Math.abs(x));
  E.keys.forEach((k, j) => {
    const tr = el('tr', (k.masked ? 'masked' : '') + (top && k.key === top.key ? ' top' : ''));
    tr.dataset.key = j;
    cellText(tr, String(j));
    cellText(tr, shown(E.key_tokens[j]), undefined, 'tk');
    const kb = el('td', 'bars');
    kb.appendChild(bars(k.k, Math.min(140, Math.max(60, 3 * D)), 18, qmax, later));
    tr.appendChild(kb);
    cellText(tr, k.raw.toFixed(4), k.raw, 'raw');
    cellText(tr, k.masked ? '−∞' : k.scaled.toFixed(4), k.masked ? '-inf' : k.scaled, 'scaled');
    cellText(tr, k.masked ? '0' : expo[j].toFixed(4), expo[j], 'exp');
    cellText(tr, k.weight.toFixed(4), k.weight, 'weight');
    const wtd = el('td', 'bars'), wb = el('span', 'wbar');
    wb.style.width = Math.round(60 * k.weight / wmax) + 'px';
    wtd.appendChild(wb);
    tr.appendChild(wtd);
    const vb = el('td', 'bars');
    if (!k.masked) vb.appendChild(bars(wv[j], Math.min(140, Math.max(60, 3 * Dv)), 18, vmax, later));
    tr.appendChild(vb);
    tbody.appendChild(tr);
  });
  table.appendChild(tbody);
  wrap.appendChild(table);
  s5.appendChild(wrap);
  // 6. z
  const s6 = step(6, t('s6'), t('s6_text', { dv: Dv }));
  s6.appendChild(el('div', 'small', t('z_label')));
  s6.appendChild(bars(E.output, Math.min(520, Math.max(160, 8 * Dv)), 40));
  const zline = el('div', 'formula', '|z| = ' + Math.hypot(...E.output).toFixed(4));
  zline.dataset.v = E.output.join(',');
  s6.appendChild(zline);
  const removed = isAblated(E.layer_index, E.head);
  const chk = el('div', 'check' + (removed ? ' bad' : ''),
    removed ? t('check_removed', { what: t(S.mode === 'mean' ? 'what_mean' : 'what_zero') })
      : t('check', { a: E.weight_error.toExponential(1), b: E.output_error.toExponential(1) }));
  s6.appendChild(chk);
  drawLater(later, token);
}

// ---------------------------------------------------------------- patching
function patchInput(text) {
  const ex = /^\s*example\s+(\d+)\s*$/i.exec(text);  // a held-out example (encoder-decoder models take only those)
  if (ex) return { example: Number(ex[1]) };
  if (idsMode()) {
    const parts = text.split(/[\s,]+/).filter((x) => x);
    for (const p of parts) if (!/^\d+$/.test(p)) throw new Error(t('ids_bad', { x: p }));
    return { ids: parts.map(Number) };
  }
  return { text };
}
async function runPatch() {
  const clean = $('clean').value, corrupt = $('corrupt').value;
  if (!S.info) return;
  if (!clean.trim() || !corrupt.trim()) { S.patch.error = t('p_need'); S.patch.result = null; renderPatch(); return; }
  let body;
  try {
    body = { model: S.mi, clean: patchInput(clean), corrupt: patchInput(corrupt) };
  } catch (e) { S.patch.error = e.message; S.patch.result = null; renderPatch(); return; }
  const pos = $('p-position').value.trim(), ans = $('p-answer').value.trim(), wr = $('p-wrong').value.trim();
  if (pos) body.position = /^\d+$/.test(pos) ? Number(pos) : pos;
  if (ans) body.answer = idsMode() && /^\d+$/.test(ans) ? Number(ans) : ans;
  if (wr) body.wrong = idsMode() && /^\d+$/.test(wr) ? Number(wr) : wr;
  const seq = ++S.patch.seq;
  $('p-status').textContent = t('p_running');
  const r = await api('/api/patch', body);
  if (seq !== S.patch.seq) return;
  S.patch.result = r.ok ? r.data : null;
  S.patch.error = r.ok ? '' : t('server_says') + r.error;
  if (S.patch.sel && r.ok) {
    const [l, h] = S.patch.sel;
    if (!r.data.patching.layers[l] || !r.data.patching.layers[l].heads[h]) S.patch.sel = null;
  }
  renderPatch();
}
function patchColour(x) {  // blue for restoring, red for pushing the other way, white at 0
  if (x == null || !isFinite(x)) return '#eef1f5';
  const a = Math.max(-1, Math.min(1, x));
  const mix = (c, f) => Math.round(255 + (c - 255) * f);
  return a >= 0 ? `rgb(${mix(37, a)},${mix(99, a)},${mix(235, a)})` : `rgb(${mix(194, -a)},${mix(65, -a)},${mix(12, -a)})`;
}
function renderPatch() {
  const err = $('p-error');
  err.hidden = !S.patch.error;
  err.textContent = S.patch.error;
  const grid = $('p-grid'), sum = $('p-summary'), det = $('p-detail');
  grid.textContent = '', sum.textContent = '', det.textContent = '';
  const R = S.patch.result;
  if (!R) { $('p-status').textContent = ''; return; }
  const P = R.patching;
  let n = 0;
  for (const l of P.layers) n += l.heads.length;
  $('p-status').textContent = t('p_done', { n, ms: R.ms.toFixed(0) });
  sum.textContent = t('p_summary', { a: P.answer_token, w: P.wrong_token, p: P.position, c: signed(P.clean),
    x: signed(P.corrupt), pc: fmt(P.clean_p_answer), px: fmt(P.corrupt_p_answer) });
  sum.dataset.clean = P.clean, sum.dataset.corrupt = P.corrupt;
  if (P.clean === P.corrupt) sum.textContent += ' ' + t('p_same');
  const hint = el('div', 'muted small', t('p_hint'));
  sum.appendChild(hint);
  const Hn = Math.max(...P.layers.map((l) => l.heads.length));
  grid.style.gridTemplateColumns = `auto repeat(${Hn}, auto)`;
  grid.appendChild(el('div'));
  for (let h = 0; h < Hn; h++) grid.appendChild(el('div', 'hcol', t('head') + ' ' + h));
  P.layers.forEach((layer, l) => {
    grid.appendChild(el('div', 'prow', l + ' ' + layer.name));
    for (let h = 0; h < Hn; h++) {
      const hd = layer.heads[h];
      const c = el('div', 'pc');
      if (!hd) { grid.appendChild(c); continue; }
      c.dataset.layer = l, c.dataset.head = h, c.dataset.v = hd.restored == null ? '' : String(hd.restored);
      c.style.background = patchColour(hd.restored);
      const strong = hd.restored != null && Math.abs(hd.restored) > 0.55;
      c.style.color = strong ? '#fff' : '#1c2430';
      c.appendChild(el('span', null, hd.restored == null ? '–' : hd.restored.toFixed(3)));
      c.appendChild(el('span', 'hn', l + '.' + h));
      if (S.patch.sel && S.patch.sel[0] === l && S.patch.sel[1] === h) c.classList.add('sel');
      c.addEventListener('click', () => { S.patch.sel = [l, h]; renderPatch(); });
      grid.appendChild(c);
    }
  });
  if (S.patch.sel) {
    const [l, h] = S.patch.sel, hd = P.layers[l].heads[h];
    det.textContent = t('p_detail', { h: l + '.' + h, a: P.answer_token, x: fmt(P.corrupt_p_answer), y: fmt(hd.p_answer),
      c: fmt(P.clean_p_answer), r: hd.restored == null ? '–' : hd.restored.toFixed(3) });
  }
}

// ---------------------------------------------------------------- training, live
async function pollRun() {
  const r = await api('/api/run');
  if (r.ok) {
    S.runInfo = r.data;
    const sn = r.data.snapshots;
    if (sn && sn.version !== S.runVersion) {
      S.runVersion = sn.version;
      const slider = $('snap-step');
      slider.max = String(sn.steps.length - 1);
      $('snap-example').max = String(Math.max(0, sn.examples - 1));
      if ($('snap-follow').checked || S.snapIndex < 0) S.snapIndex = sn.steps.length - 1;
      slider.value = String(S.snapIndex);
      loadSnapshot();
    }
    renderTrain();
  }
  setTimeout(pollRun, 2000);
}
async function loadSnapshot() {
  const seq = ++S.snapSeq;
  const ex = Math.max(0, Number($('snap-example').value) || 0);
  const r = await api('/api/snapshot?step=' + S.snapIndex + '&example=' + ex);
  if (seq !== S.snapSeq) return;
  S.snap = r.ok ? r.data : null;
  if (!r.ok) S.runInfo = Object.assign({}, S.runInfo, { snapshots_note: r.error });
  renderTrain();
}
function renderTrain() {
  $('train-none').hidden = S.run;
  $('train-on').hidden = !S.run;
  const R = S.runInfo;
  if (!S.run || !R) return;
  $('run-dir').textContent = R.dir;
  const note = [R.metrics_note, R.snapshots_note].filter((x) => x).join(' · ') || (R.metrics ? '' : t('run_wait'));
  $('run-note').hidden = !note;
  $('run-note').textContent = note;
  $('curve-legend').textContent = t('legend');
  drawCurves(R.metrics);
  const sn = R.snapshots;
  if (sn && S.snap) {
    $('snap-label').textContent = t('step_n', { s: S.snap.step }) + ' · ' + t('snap_of', { i: S.snap.index + 1, n: S.snap.steps });
    const L0 = S.snap.layers[0];
    $('snap-tokens').textContent = L0 ? L0.query_tokens.map(shown).join(' ') : '';
    drawSnapGrid();
  }
}
function drawCurves(M) {
  const cv = $('curves'), ctx = cv.getContext('2d');
  const W = cv.width, Hh = cv.height;
  ctx.clearRect(0, 0, W, Hh);
  if (!M || !M.rows.length) return;
  const col = (name) => M.columns.indexOf(name);
  const cs = col('step'), ct = col('train_loss'), ce = col('eval_loss');
  const pts = (c) => (c < 0 ? [] : M.rows.filter((r) => r[c] != null && r[cs] != null).map((r) => [r[cs], r[c]]));
  const tr = pts(ct), ev = pts(ce), all = tr.concat(ev);
  if (!all.length) return;
  const x0 = Math.min(...all.map((p) => p[0])), x1 = Math.max(...all.map((p) => p[0]), x0 + 1);
  const y0 = Math.min(0, ...all.map((p) => p[1])), y1 = Math.max(...all.map((p) => p[1])) * 1.05 || 1;
  const L = 46, B = 24, T = 8, Rm = 10;
  const X = (x) => L + (x - x0) / (x1 - x0) * (W - L - Rm), Y = (y) => T + (1 - (y - y0) / (y1 - y0)) * (Hh - T - B);
  ctx.strokeStyle = '#dfe4ea', ctx.fillStyle = '#5e6b7b', ctx.font = '11px sans-serif', ctx.lineWidth = 1;
  for (let k = 0; k <= 4; k++) {
    const y = y0 + (y1 - y0) * k / 4;
    ctx.beginPath(); ctx.moveTo(L, Y(y)); ctx.lineTo(W - Rm, Y(y)); ctx.stroke();
    ctx.fillText(y.toFixed(2), 4, Y(y) + 4);
  }
  for (let k = 0; k <= 4; k++) {
    const x = x0 + (x1 - x0) * k / 4;
    const label = String(Math.round(x));
    ctx.fillText(label, Math.min(W - ctx.measureText(label).width - 2, Math.max(0, X(x) - ctx.measureText(label).width / 2)), Hh - 6);
  }
  const line = (p, colour) => {
    if (!p.length) return;
    ctx.strokeStyle = colour, ctx.lineWidth = 2;
    ctx.beginPath();
    p.forEach((q, i) => (i ? ctx.lineTo(X(q[0]), Y(q[1])) : ctx.moveTo(X(q[0]), Y(q[1]))));
    ctx.stroke();
  };
  line(tr, '#2563eb');
  line(ev, '#ea7a3b');
  cv.dataset.points = String(all.length);
}
const SHORT = { previous_token: 'prev', first_token: 'first', induction: 'induct', retrieval: 'retr', self: 'self',
  entropy: 'H', max_weight: 'max' };
function drawSnapGrid() {
  const G = $('snap-grid'), D = S.snap;
  const Hn = Math.max(...D.layers.map((l) => l.weights.length));
  G.style.gridTemplateColumns = `18px repeat(${Hn}, auto)`;
  G.textContent = '';
  G.appendChild(el('div'));
  for (let h = 0; h < Hn; h++) G.appendChild(el('div', 'hcol', String(h)));
  D.layers.forEach((layer, l) => {
    G.appendChild(el('div', 'lhead', layer.name));
    for (let h = 0; h < Hn; h++) {
      const cell = el('div', 'cell');
      if (h >= layer.weights.length) { cell.style.visibility = 'hidden'; G.appendChild(cell); continue; }
      const cv = el('canvas');
      paint(cv, floats(layer.weights[h]), layer.query_tokens.length, layer.key_tokens.length);
      cell.appendChild(cv);
      const cap = el('div', 'cap');
      cap.appendChild(el('span', 'hn', l + '.' + h));
      cell.appendChild(cap);
      const sc = layer.scores[h] || {};
      const names = Object.keys(sc).filter((k) => k !== 'entropy' && k !== 'max_weight')
        .sort((a, b) => sc[b] - sc[a]).slice(0, 2);
      cell.appendChild(el('div', 'sc', names.map((k) => (SHORT[k] || k) + ' ' + sc[k].toFixed(2)).join('  ')));
      G.appendChild(cell);
    }
  });
}

function renderFoot() {
  const ms = S.timings.latency, s = S.timings.server;
  $('foot').textContent = ms == null ? '' : t('foot', { ms: ms.toFixed(0), s: s == null ? '–' : s.toFixed(1) });
}

// ---------------------------------------------------------------- wiring
function wire() {
  for (const b of document.querySelectorAll('#langs button')) b.addEventListener('click', () => applyLang(b.dataset.lang));
  for (const b of document.querySelectorAll('#tabs button')) b.addEventListener('click', () => applyTab(b.dataset.tab));
  $('model').addEventListener('change', () => chooseModel(Number($('model').value)));
  $('text').addEventListener('input', (e) => {
    S.input = { mode: idsMode() ? 'ids' : 'text', text: $('text').value, example: S.input.example };
    S.masks = [];
    S.textbook = false;
    analyze(e.timeStamp);
  });
  $('example').addEventListener('change', () => {
    const n = Math.max(0, Math.min(Number($('example').value) || 0, (S.info ? S.info.examples : 1) - 1));
    S.input = { mode: 'example', text: '', example: n };
    S.masks = [];
    $('text').value = '';
    analyze(performance.now());
  });
  $('ablate-mode').addEventListener('change', () => {
    S.mode = $('ablate-mode').value;
    if (S.ablated.length) { analyze(performance.now()); heldout(); }
  });
  $('restore').addEventListener('click', () => { S.ablated = []; analyze(performance.now()); heldout(); });
  // Patching runs 2 + L*H forward passes: on the button or Enter, not on every keystroke (a
  // half-typed pair is rarely of equal lengths).
  for (const id of ['clean', 'corrupt', 'p-position', 'p-answer', 'p-wrong'])
    $(id).addEventListener('keydown', (e) => { if (e.key === 'Enter') { e.preventDefault(); runPatch(); } });
  $('p-run').addEventListener('click', runPatch);
  $('snap-step').addEventListener('input', () => {
    S.snapIndex = Number($('snap-step').value);
    $('snap-follow').checked = S.runInfo && S.runInfo.snapshots && S.snapIndex === S.runInfo.snapshots.steps.length - 1;
    loadSnapshot();
  });
  $('snap-example').addEventListener('change', loadSnapshot);
}

// The harness: what the page shows, as numbers, and the actions a test takes without the mouse.
Object.assign(H, {
  state: () => ({
    ready: H.ready, tab: S.tab, lang: S.lang, model: S.mi, seq: S.seq, drawnSeq: S.drawnSeq, inflight: S.inflight,
    tokens: S.result ? S.result.tokens : null, loss: S.result ? S.result.loss : null,
    answer: S.result ? S.result.answer : null, ablated: S.ablated.map((x) => x.slice()), mode: S.mode,
    sel: Object.assign({}, S.sel), explainSeq: S.explainSeq,
    explain: S.explain ? { layer: S.explain.layer_index, head: S.explain.head, query: S.explain.query } : null,
    resultSeq: S.result ? S.result.seq : 0, explainFor: S.explain ? S.explain.forSeq : 0,
    heldout: S.heldout, patch: S.patch.result ? S.patch.result.patching : null, patchError: S.patch.error,
    inputError: S.inputError, timings: { latency: S.timings.latency, server: S.timings.server, phases: S.timings.phases, steps_ms: S.timings.steps_ms,
      history: S.timings.history.slice() },
    snap: S.snap ? { step: S.snap.step, index: S.snap.index } : null, runVersion: S.runVersion, errors: H.errors.slice(),
  }),
  selectHead, selectQuery, toggleHead, setLang: applyLang, setTab: applyTab, runPatch,
  box: (selector) => {
    const e = document.querySelector(selector);
    if (!e) return null;
    e.scrollIntoView({ block: 'center', inline: 'center' });
    const b = e.getBoundingClientRect();
    return { x: b.left, y: b.top, w: b.width, h: b.height };
  },
});

function start() {
  wire();
  let lang = 'en';
  try { lang = localStorage.getItem('qkv-studio-lang') || ''; } catch (e) { lang = ''; }
  if (!lang) lang = /^zh/i.test(navigator.language || '') ? 'zh' : 'en';
  applyLang(lang);
  loadModels();
}
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
})();
