// qkv studio (share/studio/studio.js): the page of `qkv serve` (docs/studio.md), and of the pages
// `qkv view` saves (docs/viewer.md): there the studio's answers are embedded in the page
// (the script element qkv-data) and read instead of asked of a server. Served, it talks to the server's
// JSON API only (/api/...), on the same origin; saved, it fetches nothing at all.
// window.qkvStudio is the page's test harness (tests/studio/browser_test.py, tests/viewer/).

// ---------------------------------------------------------------- errors first
// Every error goes into qkvStudio.errors and into a visible banner. qkv view writes this part as a
// script element of its own, so that these handlers also see a syntax error in the rest.
(function () {
  'use strict';
  const H = window.qkvStudio = { ready: false, errors: [] };
  const early = [];
  function banner(msg) {
    const b = document.getElementById('banner');
    if (!b) { early.push(msg); return; }
    b.hidden = false;
    const line = document.createElement('div');
    line.textContent = 'Studio error: ' + msg;
    b.appendChild(line);
  }
  H.reportError = (msg) => { H.errors.push(msg); banner(msg); };
  window.addEventListener('error', (e) => H.reportError(String(e.message) +
    (e.filename ? ' (' + String(e.filename).split('/').pop() + ':' + e.lineno + ')' : '')));
  window.addEventListener('unhandledrejection', (e) => {
    const r = e.reason;
    H.reportError('unhandled rejection: ' + (r && r.message ? r.message : String(r)));
  });
  document.addEventListener('DOMContentLoaded', () => early.splice(0).forEach(banner));
})();

// ==== qkv view: the page's script starts here
(function () {
'use strict';
const H = window.qkvStudio;

// ---------------------------------------------------------------- words, in both languages
// The Chinese is written for Chinese readers, not translated word for word; quotes are “”.
const WORDS = {
  en: {
    model: 'Model', tab_look: 'Look inside', tab_patch: 'Patch heads', tab_train: 'Training, live',
    tab_train_saved: 'Training',
    input_label: 'Type a sentence', input_label_ids: 'Type token ids', or_example: 'or a held-out example',
    input_label_saved: 'The input', answer_title: "The model's answer", grid_title: 'Every head, on this input',
    ablate_mode: 'Removed heads output', mode_zero: 'zero', mode_mean: 'their mean', restore_all: 'Restore all',
    grid_hint: "Each square: a head's attention weights (rows: queries, columns: keys), with its label under it. Click a square to open the head; the switch under it removes the head.",
    grid_hint_saved: "Each square: a head's attention weights (rows: queries, columns: keys), with its label under it. Click a square to open the head.",
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
    example_note_saved: 'Held-out example {n}.',
    empty_input: 'Nothing to look at yet: type a sentence, and every head is drawn on it.',
    empty_ids: 'Nothing to look at yet: type token ids, and every head is drawn on them.',
    err_input: 'The model cannot read this input. The server says: {e}',
    err_server: 'The server answered with an error ({s}): {e}',
    fills_at: '[MASK] at position {p}, the model fills:', next_title: 'The next token, after the input:',
    labels_title: 'The output at every position (green: right, red: wrong):',
    no_mask: 'No [MASK] in the input: type [MASK], or click a token to hide it, and the model fills it.',
    most_likely: 'Most likely: ',
    reads_back: 'What it predicts at every position, reading the whole input:',
    unsure: 'The model is unsure here: its most likely fill, “{t}”, has p = {p}, below {min}. This sentence may be beyond what it learned: read the fills, and the weights behind them, with care.',
    loss_line: 'loss <b>{loss}</b> over {n} scored position{s}, accuracy <b>{acc}</b>',
    loss_intact: ' (all heads: loss {loss}, accuracy {acc})',
    loss_none: 'No loss on this input: no position has a known answer.',
    heldout: 'Held-out, the first {n} test examples (as qkv ablate computes it): loss {a} → <b>{b}</b> ({d}), accuracy {x} → <b>{y}</b>',
    heldout_intact: 'Held-out, the first {n} test examples: loss <b>{a}</b>, accuracy <b>{x}</b>. Remove heads to see what they are worth.',
    heldout_off: 'Held-out metrics are off: they need the model’s data, {why}.',
    heldout_wait: 'Held-out metrics: computing…',
    labels_legend: 'Labels: what each head does over the first {n} held-out examples (as qkv heads computes them). A positional label (previous, next, first token, itself, a fixed offset) says the head looks at a place; a role label (such as verb->object) says it finds a word by its role, better than the best fixed offset. No label: no score passed its threshold.',
    labels_off: 'No head labels: they need the model’s held-out data, {why}.',
    labels_wait: 'Head labels: computing…',
    sw_on: 'on', sw_off: 'removed', head: 'head', layer: 'layer',
    step_where: 'head {l}.{h}, the query at position {i}, “{t}”',
    intro_textbook: 'The textbook example: in 猫喜欢追逐老鼠 (“the cat likes to chase mice”), the query of 追 (“chase”) asks who chases, and what. Of this model’s heads, {h} puts the most of 追’s weight on 猫, 老 and 鼠: {shares}. Follow it below, with the model’s own numbers; click another head or token to follow those.',
    share_on: '{p}% on {t}', list_sep: ', ',
    intro: 'Pick a head (a square on the left) and a query token: below is where that query looks in every head, the head’s weights, and how the head computes the query’s output, with the model’s own numbers.',
    intro_saved: 'Pick a head (a square on the left) and a query token (a row of the head’s weights): below is where that query looks in every head, and the head’s weights with the tokens on both axes.',
    rows_title: 'Where does “{t}” (position {i}) look, in every head?',
    rows_hint: 'A row per head (layer.head, with its label), a column per key token: the query’s weight on each key, in percent (hover for the exact number). Click a row to open that head.',
    hm_title: 'Head {h} ({name}): every query’s weights',
    hm_hint: 'Rows: queries, columns: keys. Hover a square for its weight; click a row (or press ↑ ↓) to make it the query, the marked row; ← → change the head.',
    hm_cell: 'query {i} “{q}” → key {j} “{k}”: weight {w} ({p}%)',
    hm_row: 'query {i} “{q}” looks most at: {top}',
    scores_of: 'Scores over {n} held-out examples:',
    saved_note: 'This page is the studio, saved by qkv view ({title}). It shows every head on this input, each head’s weights, scores and label, and the training snapshots; typing another input, removing heads, patching and the step-by-step view need the server: qkv serve CKPT.',
    saved_no: 'This needs the server (qkv serve): this page is the studio, saved.',
    heldout_saved: 'Held-out metrics need the server (qkv serve).',
    newest: 'Newest checkpoint', newest_title: 'Reload this model from the run’s last.h5, the checkpoint written last (best.h5 may be older)',
    newest_busy: 'loading the run’s last.h5…', newest_done: 'Now showing {path}.', newest_fail: 'Could not load the newest checkpoint: {e}',
    problems_title: 'This page cannot be shown',
    problems_help: 'The page reads the data qkv view writes (format qkv-studio-page, version 1; docs/viewer.md).',
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
    s7: "In the program's words", s7_text: 'A compiled model: this head computes a line of its program, and q and k hold the values it compares.',
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
    p_method: 'Method', m_patch: 'activation patching', m_eapig: 'EAP-IG (gradients, 5 steps)', m_eap: 'EAP (gradients)',
    m_attr: 'attribution patching',
    a_hint: 'Estimated share of the difference each head restores, from gradients ({f} forward and {b} backward passes; activation patching takes {p} forward passes). Recomputed as you type. Click a head for its positions and its paths.',
    a_done: '{n} heads attributed in {ms} ms', a_positions: 'Head {h}, per position:',
    a_edges: 'The edges with the largest share:', path_title: 'Path patching from head {h}: the share it carries through each receiver alone',
    path_together: 'every later head at once: {r}', lens_title: 'Logit lens: what the clean input’s stream says after each layer',
    lens_intro: 'The residual stream after each stage, read by the model’s final norm and output layer as if it were the last: the most likely token at the measured position, its probability, and the logit difference there. Below: each head’s direct share of the final logit difference.',
    lens_stage: 'stage', lens_top: 'most likely at {p}', lens_diff: 'logit({a}) − logit({w})',
    lens_dla: 'Direct logit attribution: {list}', lens_post: 'No direct logit attribution for a post-LN model.',
    step_n: 'step {s}', snap_of: 'snapshot {i} of {n}',
    run_wait: 'Waiting for the run’s first evaluation (metrics.csv)…',
    legend: 'blue: training loss · orange: held-out loss · x: step',
    net_error: 'Cannot reach the studio’s server: {e}',
    foot: 'Last redraw {ms} ms after the keystroke (the server took {s} ms).',
    info: '{task}, {arch}, {l} attention layers × {h} heads, context {c}',
    removed_n: '{n} head{s} removed',
  },
  zh: {
    model: '模型', tab_look: '看注意力', tab_patch: '激活修补', tab_train: '看训练过程',
    tab_train_saved: '训练过程',
    input_label: '输入一句话', input_label_ids: '输入词元编号', or_example: '或者选一个留出集的例子',
    input_label_saved: '输入', answer_title: '模型的回答', grid_title: '这句话上的每一个注意力头',
    ablate_mode: '去掉的头输出', mode_zero: '零', mode_mean: '它的平均输出', restore_all: '全部恢复',
    grid_hint: '每个方块是一个头的注意力权重：行是查询，列是键；方块下面写着这个头的标签。点一下方块就能打开这个头；方块下面的开关可以把这个头去掉。',
    grid_hint_saved: '每个方块是一个头的注意力权重：行是查询，列是键；方块下面写着这个头的标签。点一下方块就能打开这个头。',
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
    example_note_saved: '这是留出集的第 {n} 个例子。',
    empty_input: '还没有可看的：输入一句话，每个头在这句话上的注意力就会画出来。',
    empty_ids: '还没有可看的：输入词元编号，每个头在上面的注意力就会画出来。',
    err_input: '模型读不了这个输入。服务器的原话（英文）：{e}',
    err_server: '服务器出错了（{s}），原话（英文）：{e}',
    fills_at: '第 {p} 个位置的 [MASK]，模型会填：', next_title: '接下来的词元，模型猜：',
    labels_title: '每个位置的输出（绿色是对的，红色是错的）：',
    no_mask: '输入里没有 [MASK]：打一个 [MASK]，或者点一个字把它遮住，模型就会来填。',
    most_likely: '最可能是：',
    reads_back: '看着整句话，模型在每个位置上猜的字：',
    unsure: '模型在这里没有把握：它最可能填的“{t}”，概率只有 {p}，低于 {min}。这句话可能超出了它学到的东西：看它填的字和背后的注意力权重时要小心。',
    loss_line: '损失 <b>{loss}</b>（按 {n} 个有答案的位置算），准确率 <b>{acc}</b>',
    loss_intact: '（所有头都在时：损失 {loss}，准确率 {acc}）',
    loss_none: '这个输入上没有损失可算：没有哪个位置的答案是已知的。',
    heldout: '留出集前 {n} 个测试例子（和 qkv ablate 的算法一样）：损失 {a} → <b>{b}</b>（{d}），准确率 {x} → <b>{y}</b>',
    heldout_intact: '留出集前 {n} 个测试例子：损失 <b>{a}</b>，准确率 <b>{x}</b>。去掉几个头，看看它们值多少。',
    heldout_off: '留出集指标用不了：需要模型的数据，{why}。',
    heldout_wait: '留出集指标：正在算……',
    labels_legend: '标签：每个头在留出集前 {n} 个例子上做的事（和 qkv heads 的算法一样）。位置标签（前一个、后一个、第一个词元、它自己、固定的距离）说明这个头看的是一个位置；角色标签（比如 verb->object，动词找宾语）说明它按词在句子里的角色找词，而且比最好的固定距离找得更准。没有标签：没有哪个分数过了它的门槛。',
    labels_off: '没有头的标签：标签需要模型的留出集数据，{why}。',
    labels_wait: '头的标签：正在算……',
    sw_on: '开着', sw_off: '已去掉', head: '头', layer: '层',
    step_where: '头 {l}.{h}，查询是位置 {i} 上的“{t}”',
    intro_textbook: '课本上的例子：“猫喜欢追逐老鼠”里，“追”的查询在问：谁在追？追的是什么？这个模型的所有头里，{h} 把“追”的权重放在“猫”“老”“鼠”上最多：{shares}。下面就用模型自己的数字跟着它走一遍。点别的头或者别的字，就换成跟着它们走。',
    share_on: '{p}% 落在“{t}”上', list_sep: '，',
    intro: '在左边选一个头（一个方块），再选一个查询词元：下面是这个查询在每个头里看向哪里、这个头的全部权重，以及这个头怎么算出这个查询的输出，用的都是模型自己的数字。',
    intro_saved: '在左边选一个头（一个方块），再选一个查询词元（这个头权重图里的一行）：下面是这个查询在每个头里看向哪里，以及这个头的全部权重，两条轴上都标着词元。',
    rows_title: '“{t}”（位置 {i}）在每个头里看向哪里？',
    rows_hint: '每个头一行（层.头，后面是它的标签），每个键词元一列：这个查询放在每个键上的权重，用百分数表示（鼠标停在上面可以看到精确的数）。点一行就打开那个头。',
    hm_title: '头 {h}（{name}）：每个查询的权重',
    hm_hint: '行是查询，列是键。鼠标停在一个小方格上可以看到它的权重；点一行（或者按 ↑ ↓）就让它当查询，也就是标出来的那一行；按 ← → 换一个头。',
    hm_cell: '查询 {i}“{q}” → 键 {j}“{k}”：权重 {w}（{p}%）',
    hm_row: '查询 {i}“{q}”看得最多的是：{top}',
    scores_of: '在 {n} 个留出集例子上的分数：',
    saved_note: '这个网页是用 qkv view 存下来的 studio（{title}）。它能看这句话上的每一个头、每个头的权重、分数和标签，还有训练过程的快照；要换一句话、去掉头、做激活修补或者一步一步地算，就需要服务器：qkv serve CKPT。',
    saved_no: '这要用服务器（qkv serve）：这个网页是存下来的 studio。',
    heldout_saved: '留出集指标要用服务器（qkv serve）才能算。',
    newest: '最新的检查点', newest_title: '从这次训练的 last.h5 重新载入模型，这是最后写下的检查点（best.h5 可能更旧）',
    newest_busy: '正在载入这次训练的 last.h5……', newest_done: '现在看的是 {path}。', newest_fail: '载入最新的检查点失败了：{e}',
    problems_title: '这个网页显示不了',
    problems_help: '这个网页读的是 qkv view 写的数据（格式 qkv-studio-page，第 1 版；见 docs/viewer.md）。',
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
    s7: '用程序的话说', s7_text: '编译出的模型：这个头计算程序里的一行，q 和 k 装着它要比较的值。',
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
    p_method: '方法', m_patch: '激活修补', m_eapig: 'EAP-IG（梯度，5 步）', m_eap: 'EAP（梯度）', m_attr: '归因修补',
    a_hint: '用梯度估计每个头能找回的比例（{f} 次前向、{b} 次反向计算；激活修补要 {p} 次前向）。一边输入一边重算。点一个头，看它在每个位置上的分数和它的路径。',
    a_done: '{n} 个头的归因，用了 {ms} 毫秒', a_positions: '{h} 这个头在每个位置上：',
    a_edges: '比例最大的几条边：', path_title: '从 {h} 这个头出发的路径修补：它单独经过每个接收者带过去的比例',
    path_together: '后面所有的头一起：{r}', lens_title: 'Logit 透镜：干净输入的残差流在每一层之后说了什么',
    lens_intro: '把每一层之后的残差流当作最后一层，用模型最后的归一化和输出层来读：在被衡量的位置上最可能的字、它的概率，以及那里的 logit 差。下面是每个头对最后 logit 差的直接贡献。',
    lens_stage: '阶段', lens_top: '位置 {p} 上最可能的', lens_diff: '“{a}”与“{w}”的 logit 差',
    lens_dla: '直接 logit 归因：{list}', lens_post: '后归一化（post-LN）的模型没有直接 logit 归因。',
    step_n: '第 {s} 步', snap_of: '第 {i} 个快照，共 {n} 个',
    run_wait: '正在等这次训练的第一次评估（metrics.csv）……',
    legend: '蓝色：训练损失 · 橙色：留出集损失 · 横轴：训练步数',
    net_error: '连不上 studio 的服务器：{e}',
    foot: '按键之后 {ms} 毫秒重画完（其中服务器用了 {s} 毫秒）。',
    info: '{task}，{arch}，{l} 层注意力 × {h} 个头，上下文 {c}',
    removed_n: '去掉了 {n} 个头',
  },
};

const S = {
  lang: 'en', tab: 'look', models: [], run: false, mi: 0, info: null,
  saved: null,  // the embedded data of a page qkv view wrote (null: served by qkv serve)
  input: { mode: 'text', text: '', example: 0 }, masks: [], ablated: [], mode: 'zero',
  sel: { layer: 0, head: 0, query: 0 }, textbook: false, hover: null,
  seq: 0, want: null, inflight: false, pending: false, drawnSeq: 0, result: null, inputError: '', empty: false,
  explain: null, explainSeq: 0, heldout: null, heldoutSeq: 0, heldoutNote: '',
  heads: null, headsSeq: 0, headsNote: '', newest: '',
  timings: { latency: null, server: null, history: [] },
  patch: { seq: 0, result: null, error: '', sel: null, body: null, path: null, pathError: '', lens: null },
  runInfo: null, runVersion: null, snap: null, snapIndex: -1, snapSeq: 0, curves: null, problems: [],
};
// Below this probability the model's most likely fill is shown with a warning that it is unsure
// (docs/studio.md): on a vocabulary of thousands, a model that can do the sentence is rarely below it.
const UNSURE = 0.1;

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
const fmt = (x, d = 4) => (x == null || !isFinite(x) ? '–' : Number(x).toFixed(d));
const pct = (x) => (x == null || !isFinite(x) ? '–' : (100 * x).toFixed(2) + '%');
const signed = (x, d = 4) => (x == null || !isFinite(x) ? '–' : (x >= 0 ? '+' : '−') + Math.abs(x).toFixed(d));
const clamp = (x, lo, hi) => Math.max(lo, Math.min(hi, x));
function shown(tok) { return tok === ' ' ? '␣' : tok === '\n' ? '⏎' : tok === '\t' ? '⇥' : tok === '' ? '∅' : tok; }

// ---------------------------------------------------------------- the server (or the saved answers)
async function api(path, body) {
  if (S.saved) return savedAnswer(path, body);
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
// A saved page answers the requests the page makes about its one input from what qkv view
// embedded (the same JSON the server gives); anything else needs the server.
function savedAnswer(path, body) {
  const D = S.saved, ok = (data) => ({ ok: true, status: 200, data, phases: {} });
  const no = (why) => ({ ok: false, status: 0, error: why || t('saved_no') });
  if (path === '/api/models') return ok(D.models);
  if (path === '/api/analyze' && body && !body.ablate && JSON.stringify(body.input) === JSON.stringify(D.input))
    return ok(Object.assign({ explain: null, ms: 0 }, D.analysis));
  if (path === '/api/heads') return D.heads ? ok(D.heads) : no(D.heads_note);
  if (path === '/api/run') return ok(S.runInfo);
  const m = /^\/api\/snapshot\?step=(\d+)&example=0$/.exec(path);
  if (m && D.snapshots && +m[1] < D.snapshots.length) return ok(D.snapshots[+m[1]]);
  return no();
}
// An error from the server, in the page's language (the server's own message is English).
function serverError(r) {
  if (r.status === 0) return r.error;
  return t(r.status === 400 ? 'err_input' : 'err_server', { s: r.status, e: r.error });
}

// ---------------------------------------------------------------- colours and drawing
// viridis at 0, 0.1, ..., 1 (matplotlib).
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
const lutByte = (w) => Math.max(0, Math.min(255, Math.round(255 * w)));
function cssColour(w) {  // the viridis colour of a weight, for the table cells
  const c = LUT[lutByte(w)];
  return `rgb(${c & 255},${(c >>> 8) & 255},${(c >>> 16) & 255})`;
}
const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
function bytes(b64) {  // base64 -> Uint8Array
  const bin = atob(b64), n = bin.length, out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = bin.charCodeAt(i);
  return out;
}
function floats(b64) {  // base64 of little-endian float32 -> Float32Array
  const b = bytes(b64);
  if (LITTLE) return new Float32Array(b.buffer);
  const dv = new DataView(b.buffer), out = new Float32Array(b.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = dv.getFloat32(4 * i, true);
  return out;
}
// A layer's weights of head h as numbers in [0, 1] (uint8 rows are divided by 255), decoded once.
function headWeights(layer, h) {
  if (!layer.decoded) layer.decoded = [];
  if (!layer.decoded[h]) {
    if (layer.encoding !== 'uint8') layer.decoded[h] = floats(layer.weights[h]);
    else {
      const b = bytes(layer.weights[h]), w = new Float32Array(b.length);
      for (let i = 0; i < b.length; i++) w[i] = b[i] / 255;
      layer.decoded[h] = w;
    }
  }
  return layer.decoded[h];
}
function paint(canvas, w, rows, cols) {  // weights (rows x cols) in [0, 1] onto a canvas of that size
  if (canvas.width !== cols) canvas.width = cols;
  if (canvas.height !== rows) canvas.height = rows;
  const ctx = canvas.getContext('2d');
  const img = ctx.createImageData(cols, rows), px = new Uint32Array(img.data.buffer);
  for (let i = 0; i < rows * cols; i++) px[i] = LUT[lutByte(w[i])];
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
  try { localStorage.setItem('qkv-studio-lang', S.lang); } catch (e) { /* private mode, or a saved page */ }
  for (const b of document.querySelectorAll('#langs button')) b.setAttribute('aria-pressed', String(b.dataset.lang === S.lang));
  for (const e of document.querySelectorAll('[data-i18n]')) e.textContent = t(e.dataset.i18n);
  if (S.saved) {
    $('tab-train').textContent = t('tab_train_saved');
    $('grid-hint').textContent = t('grid_hint_saved');
    $('saved-note').textContent = t('saved_note', { title: S.saved.title || '' });
  }
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
  renderLook();
  renderHeldout();
  renderSteps();
  renderPatch();
  renderTrain();
  renderNewest();
  renderFoot();
}
// Everything the look-inside view draws from the analysis (and the head labels).
function renderLook() {
  renderTokens();
  renderGrid();
  renderLabelsNote();
  renderAnswer();
  renderIntro();
  renderRows();
  renderHeadMap();
}

// ---------------------------------------------------------------- models
async function loadModels() {
  const r = await api('/api/models');
  if (!r.ok) { showInputError(serverError(r)); H.ready = true; return; }
  S.models = r.data.models;
  S.run = S.saved ? !!S.saved.snapshots : r.data.run;
  const sel = $('model');
  sel.textContent = '';
  S.models.forEach((m, i) => {  // the run's folder and the file name; the whole path on hover
    const o = sel.appendChild(el('option', null, m.path.split('/').slice(-2).join('/') + ' (' + m.task + ')'));
    o.value = String(i);
    o.title = m.path;
  });
  sel.disabled = S.models.length < 2;
  chooseModel(0);
  if (S.run) await pollRun();
}
function chooseModel(i) {
  S.mi = i;
  S.info = S.models[i];
  $('model').value = String(i);
  const info = S.info, sug = S.saved ? savedSuggestion() : info.suggestion || {};
  S.masks = [], S.ablated = [], S.explain = null, S.result = null, S.heldout = null, S.textbookHead = null;
  S.patch.result = null, S.patch.error = '', S.patch.sel = null, S.patch.path = null, S.patch.lens = null;
  S.heads = null, S.newest = '';
  if (sug.text != null) {
    S.input = { mode: info.text ? 'text' : 'ids', text: sug.text, example: 0 };
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
  renderNewest();
  analyze(performance.now());
  S.headsDone = heads();
  heldout();
  if (S.tab === 'patch') runPatch();
}
// What a saved page shows first: its one input (the textbook's query when it is the textbook's).
function savedSuggestion() {
  const D = S.saved, sug = D.models.models[0].suggestion || {};
  const query = sug.text != null && D.input.text === sug.text ? sug.query : 0;
  if (D.input.example != null) return { example: D.input.example, query };
  return { text: D.input.text != null ? D.input.text : (D.input.ids || []).join(' '), query };
}
function renderInfo() {
  const info = S.info;
  if (!info) return;
  const heads = info.layers.length ? info.layers[0].heads : 0;
  $('model-info').textContent = $('model-info').title =
    t('info', { task: info.task, arch: info.arch, l: info.layers.length, h: heads, c: info.context });
}

// ---------------------------------------------------------------- the run's newest checkpoint
async function loadNewest() {
  S.newest = t('newest_busy');
  renderNewest();
  $('newest').disabled = true;
  const r = await api('/api/reload', { model: S.mi, latest: true });
  $('newest').disabled = false;
  if (!r.ok) { S.newest = t('newest_fail', { e: serverError(r) }); renderNewest(); return; }
  const m = await api('/api/models');
  if (m.ok) {
    S.models = m.data.models;
    S.info = S.models[S.mi];
    const o = $('model').options[S.mi];
    o.textContent = S.info.path.split('/').slice(-2).join('/') + ' (' + S.info.task + ')';
    o.title = S.info.path;
  }
  S.newest = t('newest_done', { path: r.data.reloaded });
  S.newestPath = r.data.reloaded;
  S.patch.result = null, S.patch.error = '';
  renderNewest();
  renderInfo();
  analyze(performance.now());
  heads();
  heldout();
}
function renderNewest() {
  $('newest-box').hidden = !S.run || !!S.saved;
  $('newest').title = t('newest_title');
  $('newest-note').textContent = S.newest;
}

// ---------------------------------------------------------------- the input
function idsMode() { return S.info && !S.info.text; }
function renderInputChrome() {
  const info = S.info;
  if (!info) return;
  $('input-label').textContent = t(S.saved ? 'input_label_saved' : idsMode() ? 'input_label_ids' : 'input_label');
  $('example-box').hidden = !info.with_data || !!S.saved;
  let hint = '';
  if (idsMode() && !S.saved) hint = t('hint_ids', { v: info.input_vocab });
  $('input-hint').textContent = hint;
  $('tokens-hint').textContent = info.mask_text && !S.saved ? t('hint_mask')
    : info.objective === 'causal' ? t('hint_decoder') : info.arch === 'encoder' ? t('hint_encoder') : '';
  const note = S.input.mode === 'example' ? t(S.saved ? 'example_note_saved' : 'example_note', { n: S.input.example })
    : S.result && S.result.note ? S.result.note : '';
  $('input-note').hidden = !note;
  $('input-note').textContent = note;
  $('input-empty').hidden = !S.empty;
  $('input-empty').textContent = S.empty ? t(idsMode() ? 'empty_ids' : 'empty_input') : '';
}
function showInputError(msg) {
  S.inputError = msg || '';
  $('input-error').hidden = !S.inputError;
  $('input-error').textContent = S.inputError;
}
function inputBody() {
  if (S.input.mode === 'example') return { example: S.input.example };
  if (S.saved) return S.saved.input;
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
  if (S.inflight) { S.pending = true; return S.analyzing; }
  S.analyzing = runAnalyze();
  return S.analyzing;
}
// The page shows nothing of an old input once it is gone: an empty input or an error clears the
// views, and says why on the page.
function clearResult() {
  S.result = null, S.explain = null, S.hover = null;
  renderLook();
  renderSteps();
}
async function runAnalyze() {
  const req = S.want;
  let input;
  try { input = inputBody(); } catch (e) { showInputError(e.message); clearResult(); S.drawnSeq = req.seq; return; }
  const empty = input.text !== undefined && !input.text.trim() || input.ids !== undefined && !input.ids.length;
  if (empty !== S.empty) { S.empty = empty; renderInputChrome(); }
  if (empty) {  // nothing typed: nothing to ask
    showInputError('');
    clearResult();
    S.drawnSeq = Math.max(S.drawnSeq, req.seq);
    if (S.pending) { S.pending = false; return runAnalyze(); }
    return;
  }
  S.inflight = true;
  const body = { model: S.mi, input, top_k: 5, weights: 'float32' };
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
    renderLook();
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
    if (!S.pending && !S.saved) S.explainTimer = setTimeout(explain, 120);
  } else {
    showInputError(serverError(r));
    clearResult();
    S.drawnSeq = Math.max(S.drawnSeq, req.seq);
  }
  if (S.pending) { S.pending = false; return runAnalyze(); }
}

function renderTokens() {
  const box = $('tokens');
  box.textContent = '';
  const R = S.result;
  if (!R) return;
  const maskable = !!(S.info && S.info.mask_text) && S.input.mode !== 'example' && !S.saved;
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
// The scores and label of head h of layer l (qkv heads' numbers), or null.
function headInfo(l, h) {
  if (!S.heads) return null;
  return S.heads.heads.find((x) => x.layer_index === l && x.head === h) || null;
}
// The layers whose queries are the selected layer's tokens: where the selected query is one of theirs.
function sameQueries(R, l) {
  const a = R.layers[l].query_tokens, b = R.layers[S.sel.layer] ? R.layers[S.sel.layer].query_tokens : null;
  return !!b && a.length === b.length && a.every((x, i) => x === b[i]);
}
function selectedQuery(R) {
  const layer = R && R.layers[S.sel.layer];
  return layer ? Math.min(S.sel.query, layer.query_tokens.length - 1) : 0;
}
function renderGrid() {
  const R = S.result, grid = $('grid');
  $('restore').disabled = S.ablated.length === 0;
  if (!R) { grid.textContent = '', grid.dataset.shape = ''; return; }
  const L = R.layers.length, Hn = Math.max(...R.layers.map((x) => x.weights.length));
  grid.style.gridTemplateColumns = `18px repeat(${Hn}, auto)`;
  if (grid.dataset.shape !== L + 'x' + Hn) {
    grid.textContent = '';
    grid.dataset.shape = L + 'x' + Hn;
    grid.appendChild(el('div'));
    for (let h = 0; h < Hn; h++) grid.appendChild(el('div', 'hcol', String(h)));
    for (let l = 0; l < L; l++) {
      grid.appendChild(el('div', 'lhead', R.layers[l].name));
      for (let h = 0; h < Hn; h++) {
        const cell = el('div', 'cell');
        cell.dataset.layer = l, cell.dataset.head = h;
        const tw = el('div', 'tw'), cv = el('canvas');
        cv.addEventListener('click', () => selectHead(l, h));
        tw.appendChild(cv);
        tw.appendChild(el('div', 'qm'));
        cell.appendChild(tw);
        const cap = el('div', 'cap');
        cap.appendChild(el('span', 'hn', l + '.' + h));
        const sw = el('button', 'sw');
        sw.type = 'button';
        sw.addEventListener('click', () => toggleHead(l, h));
        cap.appendChild(sw);
        cell.appendChild(cap);
        cell.appendChild(el('div', 'hl'));
        grid.appendChild(cell);
      }
    }
  }
  const q = selectedQuery(R);
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
    cell.style.visibility = '';
    const cv = cell.querySelector('canvas'), Tq = layer.query_tokens.length;
    paint(cv, headWeights(layer, h), Tq, layer.key_tokens.length);
    // the selected query's row, marked at the square's left edge
    const qm = cell.querySelector('.qm');
    qm.hidden = !sameQueries(R, l);
    qm.style.top = (100 * q / Tq) + '%', qm.style.height = Math.max(100 / Tq, 2) + '%';
    const info = headInfo(l, h), hl = cell.querySelector('.hl');
    hl.textContent = info ? info.label : '';
    cell.dataset.label = info ? info.label : '';
    const lines = [layer.name + ' · ' + t('head') + ' ' + h];
    if (info) {
      if (info.label) lines.push(info.label);
      for (const name of S.heads.score_names) if (info[name] != null) lines.push(name + ' ' + fmt(info[name], 3));
    }
    cv.title = lines.join('\n');
  }
}
function renderLabelsNote() {
  const box = $('labels-note');
  box.textContent = S.heads ? t('labels_legend', { n: S.heads.examples }) : S.headsNote;
}
async function heads() {
  const info = S.info;
  if (!info) return;
  const seq = ++S.headsSeq;
  if (!info.with_data && !S.saved) {
    S.heads = null, S.headsNote = t('labels_off', { why: info.data_note });
  } else {
    S.headsNote = t('labels_wait');
    renderLabelsNote();
    const r = await api('/api/heads', { model: S.mi });
    if (seq !== S.headsSeq) return;
    S.heads = r.ok ? r.data : null;
    S.headsNote = r.ok ? '' : S.saved ? t('labels_off', { why: r.error }) : serverError(r);
  }
  renderGrid();
  renderLabelsNote();
  renderRows();
  renderHeadMap();
}
// The textbook's question, asked of this model: of all heads, which one's query 追 puts the most
// weight on 猫 (the chaser) and 老鼠 (the chased)? The walk-through starts there.
const TEXTBOOK = { query: 3, keys: [0, 5, 6] };
function pickTextbookHead() {
  const R = S.result, q = TEXTBOOK.query;
  if (R.tokens.slice(0, 7).join('') !== '猫喜欢追逐老鼠') return;
  let best = null;
  R.layers.forEach((layer, l) => layer.weights.forEach((b64, h) => {
    const w = headWeights(layer, h), Tk = layer.key_tokens.length;
    if (layer.query_tokens.length <= q) return;
    const share = TEXTBOOK.keys.reduce((a, j) => a + (j < Tk ? w[q * Tk + j] : 0), 0);
    if (!best || share > best.share) best = { l, h, share };
  }));
  if (!best) return;
  S.sel = { layer: best.l, head: best.h, query: q };
  S.textbookHead = best;
}
// The opening sentence: on the textbook's sentence, each token named with its own weight.
function renderIntro() {
  const R = S.result, tb = S.textbookHead, box = $('intro');
  if (S.textbook && tb && R && S.sel.layer === tb.l && S.sel.head === tb.h && S.sel.query === TEXTBOOK.query) {
    const layer = R.layers[tb.l], w = headWeights(layer, tb.h), Tk = layer.key_tokens.length;
    const shares = TEXTBOOK.keys.map((j) => ({ j, w: w[TEXTBOOK.query * Tk + j] })).sort((a, b) => b.w - a.w || a.j - b.j);
    box.textContent = t('intro_textbook', { h: tb.l + '.' + tb.h, shares: shares.map((x) =>
      t('share_on', { p: (100 * x.w).toFixed(1), t: layer.key_tokens[x.j] })).join(t('list_sep')) });
    box.dataset.shares = JSON.stringify(shares.map((x) => [x.j, x.w]));
  } else {
    box.textContent = t(S.saved ? 'intro_saved' : 'intro');
    box.dataset.shares = '';
  }
}
function selectHead(l, h) {
  S.sel.layer = l, S.sel.head = h;
  S.textbook = false;
  renderSelection();
  explain();
}
function selectQuery(i) {
  S.sel.query = i;
  S.textbook = false;
  renderSelection();
  explain();
}
function renderSelection() {
  renderGrid();
  renderIntro();
  renderRows();
  renderHeadMap();
}
// The next or previous head, across layers (the head map's ← →).
function moveHead(d) {
  const R = S.result;
  if (!R) return;
  const all = [];
  R.layers.forEach((layer, l) => layer.weights.forEach((b, h) => all.push([l, h])));
  const k = all.findIndex(([l, h]) => l === S.sel.layer && h === S.sel.head);
  const [l, h] = all[clamp(k + d, 0, all.length - 1)];
  if (l !== S.sel.layer || h !== S.sel.head) selectHead(l, h);
}
function toggleHead(l, h) {
  S.ablated = isAblated(l, h) ? S.ablated.filter((x) => !(x[0] === l && x[1] === h)) : S.ablated.concat([[l, h]]);
  analyze(performance.now());
  heldout();
}

// ---------------------------------------------------------------- where one query looks, in every head
// A row per head of the layers that share the selected layer's queries, a column per key token;
// a new header row wherever the keys change (an encoder-decoder's self- and cross-attention).
function renderRows() {
  const R = S.result, table = $('rows');
  table.textContent = '';
  $('rows-panel').hidden = !R;
  if (!R) return;
  const q = selectedQuery(R), qt = R.layers[S.sel.layer].query_tokens;
  $('rows-title').textContent = t('rows_title', { t: shown(qt[q]), i: q });
  table.dataset.query = q;
  let keys = null;
  R.layers.forEach((layer, l) => {
    if (!sameQueries(R, l)) return;
    const K = layer.key_tokens, Tk = K.length;
    if (!keys || keys.join('\u0000') !== K.join('\u0000')) {
      keys = K;
      const hr = el('tr', 'keys');
      hr.appendChild(el('th', 'corner', layer.kind === 'cross' ? '→' : ''));
      K.forEach((k, j) => {
        const th = el('th', j === q && layer.kind !== 'cross' ? 'self' : null, shown(k));
        th.title = 'key ' + j + ': ' + JSON.stringify(k);
        hr.appendChild(th);
      });
      table.appendChild(hr);
    }
    layer.weights.forEach((b64, h) => {
      const w = headWeights(layer, h), info = headInfo(l, h);
      const tr = el('tr', S.sel.layer === l && S.sel.head === h ? 'sel' : null);
      tr.dataset.layer = l, tr.dataset.head = h;
      const th = el('th', 'rh');
      th.appendChild(el('span', 'hn', l + '.' + h));
      if (info && info.label) th.appendChild(el('span', 'hl', info.label));
      tr.appendChild(th);
      for (let j = 0; j < Tk; j++) {
        const x = w[q * Tk + j];
        const td = el('td', x > 0.55 ? 'hi' : null, x > 0 ? (100 * x).toFixed(1) : '');
        td.style.background = x > 0 ? cssColour(x) : '';
        td.dataset.v = String(x);
        td.title = t('hm_cell', { i: q, q: shown(qt[q]), j, k: shown(K[j]), w: x.toFixed(6), p: (100 * x).toFixed(3) });
        tr.appendChild(td);
      }
      tr.addEventListener('click', () => selectHead(l, h));
      table.appendChild(tr);
    });
  });
}

// ---------------------------------------------------------------- one head, large
// The selected head's weights with the tokens on both axes, the selected query's row marked, the
// hovered weight named.
function renderHeadMap() {
  const R = S.result;
  $('head-panel').hidden = !R;
  if (!R) return;
  const l = S.sel.layer, layer = R.layers[l];
  if (!layer) return;
  if (S.sel.head >= layer.weights.length) S.sel.head = 0;
  const h = S.sel.head, w = headWeights(layer, h), Q = layer.query_tokens, K = layer.key_tokens;
  const Tq = Q.length, Tk = K.length, info = headInfo(l, h);
  $('hm-title').textContent = t('hm_title', { h: l + '.' + h, name: layer.name });
  $('hm-label').textContent = info ? info.label : '';
  const sc = $('hm-scores');
  sc.textContent = '';
  if (info) {
    sc.appendChild(el('span', 'muted', t('scores_of', { n: S.heads.examples })));
    for (const name of S.heads.score_names) {
      if (info[name] == null) continue;
      const s = el('span', 'score');
      s.dataset.name = name, s.dataset.v = String(info[name]);
      s.appendChild(document.createTextNode(name.replace(/_/g, ' ') + ' '));
      s.appendChild(el('b', null, fmt(info[name], 3)));
      sc.appendChild(s);
    }
  }
  const c = Math.max(2, Math.min(30, Math.floor(520 / Tk), Math.floor(520 / Tq)));
  const key = [l, h, Tq, Tk, Q.join('\u0000'), K.join('\u0000')].join('|');
  const hm = $('hm');
  if (hm.dataset.key !== key) {  // the axes only when the tokens change
    hm.dataset.key = key;
    S.cell = c;
    hm.style.gridTemplateColumns = `96px ${Tk * c}px`;
    hm.style.gridTemplateRows = `72px ${Tq * c}px`;
    const keys = $('hm-keys'), qs = $('hm-queries');
    keys.textContent = '', qs.textContent = '';
    const stride = Math.ceil(13 / c);
    const upright = c >= 14 && K.every((k) => [...shown(k)].length <= 2);  // e.g. Chinese characters
    const cut = (s) => { const a = [...s]; return a.length > 10 ? a.slice(0, 9).join('') + '…' : s; };
    for (let j = 0; j < Tk; j += stride) {
      const s = el('span', upright ? null : 'v', cut(shown(K[j])));
      s.style.left = (j * c + c / 2) + 'px';
      s.dataset.j = j;
      s.title = 'key ' + j + ': ' + JSON.stringify(K[j]);
      keys.appendChild(s);
    }
    for (let i = 0; i < Tq; i += stride) {
      const s = el('span', null, cut(shown(Q[i])));
      s.style.top = (i * c + c / 2) + 'px';
      s.dataset.i = i;
      s.title = 'query ' + i + ': ' + JSON.stringify(Q[i]);
      qs.appendChild(s);
    }
    const dpr = window.devicePixelRatio || 1;
    for (const cv of [$('hm-canvas'), $('hm-over')]) {
      cv.width = Math.round(Tk * c * dpr), cv.height = Math.round(Tq * c * dpr);
      cv.style.width = Tk * c + 'px', cv.style.height = Tq * c + 'px';
    }
  }
  const scratch = S.scratch || (S.scratch = document.createElement('canvas'));
  paint(scratch, w, Tq, Tk);
  const cv = $('hm-canvas'), ctx = cv.getContext('2d');
  ctx.imageSmoothingEnabled = false;
  ctx.clearRect(0, 0, cv.width, cv.height);
  ctx.drawImage(scratch, 0, 0, cv.width, cv.height);
  S.map = { l, h, w, Q, K, Tq, Tk };
  if (S.hover && (S.hover.i >= Tq || S.hover.j >= Tk)) S.hover = null;
  drawMapOverlay();
}
function drawMapOverlay() {
  const M = S.map, cv = $('hm-over'), ctx = cv.getContext('2d'), dpr = window.devicePixelRatio || 1, c = S.cell;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cv.width, cv.height);
  const q = Math.min(S.sel.query, M.Tq - 1);
  const box = (x, y, w, h, colour) => {
    ctx.lineWidth = 3, ctx.strokeStyle = 'rgba(0,0,0,.55)', ctx.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);
    ctx.lineWidth = 1.5, ctx.strokeStyle = colour, ctx.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);
  };
  box(0, q * c, M.Tk * c, c, '#ff7a1a');  // the selected query's row
  for (const s of document.querySelectorAll('#hm-queries span.on, #hm-keys span.on')) s.classList.remove('on');
  const mark = (sel, attr, n) => { const s = document.querySelector(`${sel} span[data-${attr}="${n}"]`); if (s) s.classList.add('on'); };
  mark('#hm-queries', 'i', q);
  const st = $('hm-status');
  if (S.hover) {
    const { i, j } = S.hover, x = M.w[i * M.Tk + j];
    box(j * c - 2, i * c - 2, c + 4, c + 4, '#ffffff');
    mark('#hm-keys', 'j', j);
    st.textContent = t('hm_cell', { i, q: shown(M.Q[i]), j, k: shown(M.K[j]), w: x.toFixed(4), p: (100 * x).toFixed(2) });
    st.dataset.v = String(x);
  } else {
    const row = Array.from(M.w.subarray(q * M.Tk, (q + 1) * M.Tk));
    const top = row.map((x, j) => [x, j]).filter((p) => p[0] > 0).sort((a, b) => b[0] - a[0] || a[1] - b[1]).slice(0, 4);
    st.textContent = t('hm_row', { i: q, q: shown(M.Q[q]), top: top.map(([x, j]) =>
      '“' + shown(M.K[j]) + '” ' + (100 * x).toFixed(1) + '%').join(t('list_sep')) });
    st.dataset.v = '';
  }
}
function hoverCell(i, j) {
  S.hover = i == null ? null : { i, j };
  drawMapOverlay();
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
  const R = S.result, box = $('answer'), loss = $('loss');
  box.textContent = '';
  if (!R) { loss.textContent = '', loss.dataset.loss = ''; return; }
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
      // A model that cannot do the sentence says so rather than offering its guess as an answer.
      if (f.top.length && f.top[0].p < UNSURE) {
        const warn = el('div', 'warn', t('unsure', { t: f.top[0].token, p: f.top[0].p.toFixed(4), min: UNSURE }));
        warn.dataset.p = String(f.top[0].p);
        d.appendChild(warn);
      }
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
  if (S.saved) { S.heldout = null; S.heldoutNote = t('heldout_saved'); renderHeldout(); return; }
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
  S.heldoutNote = r.ok ? '' : serverError(r);
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
  if (!R || S.saved) return;
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
  if (!r.ok) showInputError(serverError(r));
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
  $('steps').hidden = !!S.saved;
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
  if (E.program_words && E.program_words.length) {
    const s7 = step(7, t('s7'), t('s7_text'));
    for (const line of E.program_words) s7.appendChild(el('div', 'formula program-words', line));
  }
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
  const method = $('p-method').value;
  if (method !== 'patch') body.method = method;
  $('p-status').textContent = t('p_running');
  const r = await api(method === 'patch' ? '/api/patch' : '/api/attribute', body);
  if (seq !== S.patch.seq) return;
  S.patch.result = r.ok ? patchScores(r.data) : null;
  S.patch.error = r.ok ? '' : serverError(r);
  S.patch.body = r.ok ? body : null;
  if (S.patch.sel && r.ok && (S.patch.result.scores[S.patch.sel[0]] || [])[S.patch.sel[1]] === undefined) S.patch.sel = null;
  renderPatch();
  if (r.ok) { runLens(body, seq); if (S.patch.sel) runPath(seq); }
}
// Both answers as one: the metric, and a share per head (restored by patching, or estimated).
function patchScores(d) {
  if (d.patching) {
    const P = d.patching;
    return { ms: d.ms, patching: P, attribution: null, answer_token: P.answer_token, wrong_token: P.wrong_token,
      position: P.position, clean: P.clean, corrupt: P.corrupt, names: P.layers.map((l) => l.name),
      scores: P.layers.map((l) => l.heads.map((h) => h.restored)) };
  }
  const A = d.attribution;
  return { ms: d.ms, patching: null, attribution: A, answer_token: A.answer_token, wrong_token: A.wrong_token,
    position: A.position, clean: A.clean, corrupt: A.corrupt, names: A.layers, scores: A.heads };
}
// Path patching from the selected head, to every later head's inputs and the logits.
async function runPath(seq) {
  const body = S.patch.body, [l, h] = S.patch.sel;
  const r = await api('/api/path', Object.assign({}, body, { method: undefined, sender: [l, h] }));
  if (seq !== S.patch.seq) return;
  S.patch.path = r.ok ? r.data.path : null;
  S.patch.pathError = r.ok ? '' : serverError(r);
  renderPath();
}
function renderPath() {
  const box = $('p-path');
  box.textContent = '';
  if (S.patch.pathError) { box.appendChild(el('div', 'error', S.patch.pathError)); return; }
  const P = S.patch.path;
  if (!P) return;
  box.appendChild(el('div', 'ptitle', t('path_title', { h: P.sender.join('.') })));
  const rows = P.receivers.slice().sort((a, b) => Math.abs(b.restored) - Math.abs(a.restored)).slice(0, 8);
  for (const x of rows) {
    const line = el('div', 'pathrow');
    line.dataset.name = x.name, line.dataset.v = String(x.restored);
    line.appendChild(el('span', 'pname', P.sender.join('.') + ' → ' + x.name));
    const bar = el('span', 'pbar');
    bar.style.width = Math.round(Math.min(1, Math.abs(x.restored)) * 160) + 'px';
    bar.style.background = patchColour(x.restored);
    line.appendChild(bar);
    line.appendChild(el('span', null, x.restored.toFixed(3)));
    box.appendChild(line);
  }
  if (P.receivers.length > 1) box.appendChild(el('div', 'muted small', t('path_together', { r: P.restored_all.toFixed(3) })));
}
async function runLens(body, seq) {
  const req = { model: body.model, input: body.clean };
  for (const k of ['position', 'answer', 'wrong']) if (body[k] !== undefined) req[k] = body[k];
  const r = await api('/api/lens', req);
  if (seq !== S.patch.seq) return;
  S.patch.lens = r.ok ? r.data.lens : null;
  renderLens(r.ok ? '' : serverError(r));
}
function renderLens(error) {
  const box = $('p-lens');
  box.textContent = '';
  if (error) { box.appendChild(el('div', 'error', error)); return; }
  const L = S.patch.lens;
  if (!L) return;
  const table = el('table', 'lens');
  const head = el('tr');
  for (const x of [t('lens_stage'), t('lens_top', { p: L.position }), 'p', t('lens_diff', { a: L.answer_token, w: L.wrong_token })])
    head.appendChild(el('th', null, x));
  table.appendChild(head);
  L.stages.forEach((stage, i) => {
    const top = L.top[i][L.position][0], tr = el('tr');
    tr.dataset.stage = stage;
    for (const x of [stage, top.token, fmt(top.p), signed(L.stage_diff[i])]) tr.appendChild(el('td', null, x));
    table.appendChild(tr);
  });
  box.appendChild(table);
  if (!L.dla) { box.appendChild(el('div', 'muted small', t('lens_post'))); return; }
  const list = L.contributions.slice().sort((a, b) => Math.abs(b.value) - Math.abs(a.value)).slice(0, 6)
    .map((c) => c.name + ' ' + signed(c.value)).join(', ');
  box.appendChild(el('div', 'summary', t('lens_dla', { list })));
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
  const grid = $('p-grid'), sum = $('p-summary'), det = $('p-detail'), pos = $('p-positions'), edges = $('p-edges');
  grid.textContent = '', sum.textContent = '', det.textContent = '', pos.textContent = '', edges.textContent = '';
  const R = S.patch.result;
  if (!R) { $('p-status').textContent = ''; $('p-path').textContent = ''; $('p-lens').textContent = ''; return; }
  const P = R.patching, A = R.attribution;
  let n = 0;
  for (const l of R.scores) n += l.length;
  $('p-status').textContent = t(P ? 'p_done' : 'a_done', { n, ms: R.ms.toFixed(0) });
  sum.textContent = P ? t('p_summary', { a: P.answer_token, w: P.wrong_token, p: P.position, c: signed(P.clean),
    x: signed(P.corrupt), pc: fmt(P.clean_p_answer), px: fmt(P.corrupt_p_answer) })
    : t('p_summary', { a: A.answer_token, w: A.wrong_token, p: A.position, c: signed(A.clean), x: signed(A.corrupt),
      pc: '–', px: '–' });
  sum.dataset.clean = R.clean, sum.dataset.corrupt = R.corrupt;
  if (R.clean === R.corrupt) sum.textContent += ' ' + t('p_same');
  const hint = el('div', 'muted small', P ? t('p_hint') : t('a_hint', { f: A.forward_passes, b: A.backward_passes, p: 2 + n }));
  sum.appendChild(hint);
  const Hn = Math.max(...R.scores.map((l) => l.length));
  grid.style.gridTemplateColumns = `auto repeat(${Hn}, auto)`;
  grid.appendChild(el('div'));
  for (let h = 0; h < Hn; h++) grid.appendChild(el('div', 'hcol', t('head') + ' ' + h));
  R.scores.forEach((row, l) => {
    grid.appendChild(el('div', 'prow', l + ' ' + R.names[l]));
    for (let h = 0; h < Hn; h++) {
      const v = row[h];
      const c = el('div', 'pc');
      if (v === undefined) { grid.appendChild(c); continue; }
      c.dataset.layer = l, c.dataset.head = h, c.dataset.v = v == null ? '' : String(v);
      c.style.background = patchColour(v);
      const strong = v != null && Math.abs(v) > 0.55;
      c.style.color = strong ? '#fff' : '#1c2430';
      c.appendChild(el('span', null, v == null ? '–' : v.toFixed(3)));
      c.appendChild(el('span', 'hn', l + '.' + h));
      if (S.patch.sel && S.patch.sel[0] === l && S.patch.sel[1] === h) c.classList.add('sel');
      c.addEventListener('click', () => {
        S.patch.sel = [l, h];
        renderPatch();
        if (S.patch.body) runPath(S.patch.seq);
      });
      grid.appendChild(c);
    }
  });
  if (S.patch.sel && P) {
    const [l, h] = S.patch.sel, hd = P.layers[l].heads[h];
    det.textContent = t('p_detail', { h: l + '.' + h, a: P.answer_token, x: fmt(P.corrupt_p_answer), y: fmt(hd.p_answer),
      c: fmt(P.clean_p_answer), r: hd.restored == null ? '–' : hd.restored.toFixed(3) });
  }
  if (S.patch.sel && A) {  // the selected head, position by position
    const [l, h] = S.patch.sel, per = A.head_positions[l][h];
    pos.appendChild(el('span', 'muted', t('a_positions', { h: l + '.' + h }) + ' '));
    A.tokens.forEach((tok, i) => {
      const c = el('span', 'tok', tok);
      c.dataset.v = String(per[i]);
      c.title = per[i].toFixed(4);
      c.style.background = patchColour(per[i]);
      pos.appendChild(c);
    });
  }
  if (A && A.edges.length) {
    edges.appendChild(el('div', 'ptitle', t('a_edges')));
    const top = A.edges.slice().sort((a, b) => Math.abs(b.score) - Math.abs(a.score)).slice(0, 8);
    for (const e of top) edges.appendChild(el('div', 'edge', e.from + ' → ' + e.to + '  ' + e.score.toFixed(3)));
  }
  renderPath();
}

// ---------------------------------------------------------------- training, live
// ---------------------------------------------------------------- training, live (or saved)
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
      await loadSnapshot();
    }
    renderTrain();
  }
  if (!S.saved) setTimeout(pollRun, 2000);
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
// A saved page's run: the run's /api/run answer when qkv view had it, the steps of its snapshots.
function savedRun(D) {
  const run = D.run ? Object.assign({}, D.run) : { dir: '', metrics: null, metrics_note: '', snapshots_note: '' };
  run.snapshots = { version: 1, steps: D.snapshots.map((s) => s.step), examples: 1 };
  return run;
}
function setSnapshot(i) {
  const n = S.runInfo && S.runInfo.snapshots ? S.runInfo.snapshots.steps.length : 0;
  if (!Number.isInteger(i) || i < 0 || i >= n) throw new RangeError(`setSnapshot: snapshot ${i} does not exist (0..${n - 1})`);
  S.snapIndex = i;
  $('snap-step').value = String(i);
  $('snap-follow').checked = i === n - 1;
  return loadSnapshot();
}
function renderTrain() {
  $('train-none').hidden = S.run;
  $('train-on').hidden = !S.run;
  $('snap-live').hidden = !!S.saved;
  const R = S.runInfo;
  if (!S.run || !R) return;
  $('run-dir').textContent = R.dir;
  const note = [R.metrics_note, R.snapshots_note].filter((x) => x).join(' · ') || (R.metrics || S.saved ? '' : t('run_wait'));
  $('run-note').hidden = !note;
  $('run-note').textContent = note;
  $('curve-legend').textContent = t('legend');
  $('curves-panel').hidden = !!S.saved && !R.metrics;
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
  $('foot').textContent = ms == null || S.saved ? '' : t('foot', { ms: ms.toFixed(0), s: s == null ? '–' : s.toFixed(1) });
}

// ---------------------------------------------------------------- a saved page's data, checked
// What qkv view embeds (docs/viewer.md): every problem is named by its JSON path, with what was
// expected and what was found, and the page shows them instead of a blank grid.
const KINDS = ['self', 'causal', 'cross'];
const isObj = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
function found(v) {
  if (v === undefined) return 'nothing (the field is missing)';
  if (v === null) return 'null';
  if (Array.isArray(v)) return `an array of ${v.length}`;
  if (typeof v === 'string') return `the string ${JSON.stringify(v.length > 40 ? v.slice(0, 40) + '...' : v)}`;
  if (typeof v === 'object') return 'an object';
  return `the ${typeof v} ${String(v)}`;
}
function b64Bytes(s) {  // decoded length, without decoding
  const pad = s.endsWith('==') ? 2 : s.endsWith('=') ? 1 : 0;
  return /^[A-Za-z0-9+/]*={0,2}$/.test(s) && s.length % 4 === 0 ? s.length / 4 * 3 - pad : -1;
}
function checkTokens(v, at, errs) {
  if (!Array.isArray(v) || !v.length || !v.every((x) => typeof x === 'string')) {
    errs.push(`${at}: expected a non-empty array of token strings, found ${found(v)}`);
    return 0;
  }
  return v.length;
}
// The weights of one layer (analysis or snapshot): one base64 string per head of Tq*Tk values.
function checkWeights(L, at, errs, size) {
  const Tq = checkTokens(L.query_tokens, at + '.query_tokens', errs), Tk = checkTokens(L.key_tokens, at + '.key_tokens', errs);
  if (!Array.isArray(L.weights) || !L.weights.length) {
    errs.push(`${at}.weights: expected a non-empty array (one base64 string per head), found ${found(L.weights)}`);
    return;
  }
  if (!Tq || !Tk) return;
  L.weights.forEach((s, h) => {
    const want = Tq * Tk * size, n = typeof s === 'string' ? b64Bytes(s) : -1;
    if (n !== want) {
      errs.push(`${at}.weights[${h}]: expected base64 of Tq*Tk*${size} = ${Tq}*${Tk}*${size} = ${want} bytes` +
        ` (${size === 4 ? 'float32' : 'uint8'}), found ${typeof s === 'string' ? (n < 0 ? 'text that is not base64' : `${n} bytes`) : found(s)}`);
    }
  });
}
function checkSaved(D) {
  const errs = [];
  if (!isObj(D)) return [`the data: expected a JSON object, found ${found(D)}`];
  if (D.format !== 'qkv-studio-page') errs.push(`format: expected "qkv-studio-page", found ${found(D.format)}`);
  if (D.version !== 1) errs.push(`version: expected 1 (this page reads version 1), found ${found(D.version)}`);
  if (errs.length) return errs;
  if (!isObj(D.input)) errs.push(`input: expected an object (text, ids or example), found ${found(D.input)}`);
  const M = D.models;
  if (!isObj(M) || !Array.isArray(M.models) || M.models.length !== 1 || !isObj(M.models[0]))
    errs.push(`models: expected {"models": [one model summary], ...}, found ${found(M)}`);
  else if (!Array.isArray(M.models[0].layers)) errs.push(`models.models[0].layers: expected an array, found ${found(M.models[0].layers)}`);
  const A = D.analysis;
  if (!isObj(A)) return errs.concat([`analysis: expected an object, found ${found(A)}`]);
  checkTokens(A.tokens, 'analysis.tokens', errs);
  if (!isObj(A.answer) || typeof A.answer.kind !== 'string') errs.push(`analysis.answer: expected an object with a kind, found ${found(A.answer)}`);
  if (!Array.isArray(A.layers) || !A.layers.length) errs.push(`analysis.layers: expected a non-empty array, found ${found(A.layers)}`);
  else A.layers.forEach((L, l) => {
    const at = `analysis.layers[${l}]`;
    if (!isObj(L)) { errs.push(`${at}: expected an object, found ${found(L)}`); return; }
    if (typeof L.name !== 'string' || !L.name) errs.push(`${at}.name: expected a non-empty string, found ${found(L.name)}`);
    if (!KINDS.includes(L.kind)) errs.push(`${at}.kind: expected one of ${KINDS.join(', ')}, found ${found(L.kind)}`);
    if (L.encoding !== 'float32' && L.encoding !== 'uint8') errs.push(`${at}.encoding: expected "float32" or "uint8", found ${found(L.encoding)}`);
    else checkWeights(L, at, errs, L.encoding === 'uint8' ? 1 : 4);
  });
  if (D.heads !== null) {
    if (!isObj(D.heads) || !Array.isArray(D.heads.heads) || !Array.isArray(D.heads.score_names))
      errs.push(`heads: expected null or qkv heads' object (score_names, heads), found ${found(D.heads)}`);
    else D.heads.heads.forEach((x, k) => {
      if (!isObj(x) || typeof x.label !== 'string' || !Number.isInteger(x.layer_index) || !Number.isInteger(x.head))
        errs.push(`heads.heads[${k}]: expected {layer_index, head, label, scores...}, found ${found(x)}`);
    });
  }
  if (D.snapshots !== null) {
    if (!Array.isArray(D.snapshots) || !D.snapshots.length) errs.push(`snapshots: expected null or a non-empty array, found ${found(D.snapshots)}`);
    else D.snapshots.forEach((s, i) => {
      const at = `snapshots[${i}]`;
      if (!isObj(s) || typeof s.step !== 'number' || !Array.isArray(s.layers)) {
        errs.push(`${at}: expected {step, layers, ...}, found ${found(s)}`);
        return;
      }
      s.layers.forEach((L, l) => (isObj(L) ? checkWeights(L, `${at}.layers[${l}]`, errs, 4)
        : errs.push(`${at}.layers[${l}]: expected an object, found ${found(L)}`)));
    });
  }
  if (D.run !== null && !isObj(D.run)) errs.push(`run: expected null or an object, found ${found(D.run)}`);
  return errs;
}
function showProblems(list) {
  S.problems = list.slice();
  for (const m of list) H.errors.push('data: ' + m);
  const box = $('problems');
  box.hidden = false;
  $('problems-title').textContent = t('problems_title');
  $('problems-help').textContent = t('problems_help');
  const ul = $('problems-list');
  for (const m of list.slice(0, 40)) ul.appendChild(el('li', null, m));
  if (list.length > 40) ul.appendChild(el('li', null, `... and ${list.length - 40} more`));
  $('view-look').hidden = true;
  console.warn('qkv studio: this page cannot be shown:\n' + list.join('\n'));
}
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
  // The gradient methods cost a few passes: they follow the typing (after a pause).
  let typing = 0;
  for (const id of ['clean', 'corrupt'])
    $(id).addEventListener('input', () => {
      clearTimeout(typing);
      if ($('p-method').value !== 'patch') typing = setTimeout(runPatch, 250);
    });
  $('p-method').addEventListener('change', runPatch);
  $('snap-step').addEventListener('input', () => {
    S.snapIndex = Number($('snap-step').value);
    $('snap-follow').checked = S.runInfo && S.runInfo.snapshots && S.snapIndex === S.runInfo.snapshots.steps.length - 1;
    loadSnapshot();
  });
  $('snap-example').addEventListener('change', loadSnapshot);
  $('newest').addEventListener('click', loadNewest);
  // the head map: hover a weight, click a row to make it the query, keys to move
  const over = $('hm-over');
  over.addEventListener('mousemove', (e) => {
    const M = S.map, b = over.getBoundingClientRect();
    if (!M) return;
    const i = Math.floor((e.clientY - b.top) / S.cell), j = Math.floor((e.clientX - b.left) / S.cell);
    if (i < 0 || j < 0 || i >= M.Tq || j >= M.Tk || (S.hover && S.hover.i === i && S.hover.j === j)) return;
    hoverCell(i, j);
  });
  over.addEventListener('mouseleave', () => hoverCell(null));
  over.addEventListener('click', (e) => {
    const b = over.getBoundingClientRect(), i = Math.floor((e.clientY - b.top) / S.cell);
    if (S.map && i >= 0 && i < S.map.Tq) selectQuery(i);
  });
  $('hm').addEventListener('keydown', (e) => {
    const M = S.map;
    if (!M) return;
    const q = Math.min(S.sel.query, M.Tq - 1);
    if (e.key === 'ArrowUp' || e.key === 'ArrowDown') selectQuery(clamp(q + (e.key === 'ArrowUp' ? -1 : 1), 0, M.Tq - 1));
    else if (e.key === 'ArrowLeft' || e.key === 'ArrowRight') moveHead(e.key === 'ArrowLeft' ? -1 : 1);
    else return;
    e.preventDefault();
  });
}

// The harness: what the page shows, as numbers, and the actions a test takes without the mouse.
Object.assign(H, {
  state: () => ({
    ready: H.ready, saved: !!S.saved, tab: S.tab, lang: S.lang, model: S.mi, seq: S.seq, drawnSeq: S.drawnSeq,
    inflight: S.inflight, tokens: S.result ? S.result.tokens : null, loss: S.result ? S.result.loss : null,
    answer: S.result ? S.result.answer : null, ablated: S.ablated.map((x) => x.slice()), mode: S.mode,
    sel: Object.assign({}, S.sel), hover: S.hover ? Object.assign({}, S.hover) : null, explainSeq: S.explainSeq,
    explain: S.explain ? { layer: S.explain.layer_index, head: S.explain.head, query: S.explain.query } : null,
    resultSeq: S.result ? S.result.seq : 0, explainFor: S.explain ? S.explain.forSeq : 0, empty: S.empty,
    labels: S.heads ? S.heads.heads.map((x) => [x.layer_index, x.head, x.label]) : null,
    heldout: S.heldout, patch: S.patch.result ? S.patch.result.patching : null, patchError: S.patch.error,
    attribution: S.patch.result ? S.patch.result.attribution : null, path: S.patch.path, lens: S.patch.lens,
    inputError: S.inputError, timings: { latency: S.timings.latency, server: S.timings.server, phases: S.timings.phases, steps_ms: S.timings.steps_ms,
      history: S.timings.history.slice() },
    snap: S.snap ? { step: S.snap.step, index: S.snap.index, steps: S.snap.steps } : null, runVersion: S.runVersion,
    problems: S.problems.slice(), errors: H.errors.slice(), newest: S.newestPath || '',
  }),
  selectHead, selectQuery, toggleHead, moveHead, hoverCell, setSnapshot, setLang: applyLang, setTab: applyTab, runPatch,
  box: (selector) => {
    const e = document.querySelector(selector);
    if (!e) return null;
    e.scrollIntoView({ block: 'center', inline: 'center' });
    const b = e.getBoundingClientRect();
    return { x: b.left, y: b.top, w: b.width, h: b.height };
  },
  // The box in CSS pixels of the viewport of weight (i, j) in the head map, after scrolling it into view.
  cellBox: (i, j) => {
    const M = S.map;
    if (!M) throw new Error('cellBox: no head is drawn');
    if (!Number.isInteger(i) || !Number.isInteger(j) || i < 0 || j < 0 || i >= M.Tq || j >= M.Tk)
      throw new RangeError(`cellBox: weight (${i}, ${j}) does not exist (queries 0..${M.Tq - 1}, keys 0..${M.Tk - 1})`);
    const over = $('hm-over');
    over.scrollIntoView({ block: 'nearest', inline: 'nearest' });
    const b = over.getBoundingClientRect();
    return { x: b.left + j * S.cell, y: b.top + i * S.cell, w: S.cell, h: S.cell };
  },
});

// A saved page: its data read and checked, the controls that need a server hidden.
function startSaved(node) {
  let D = null;
  const raw = node.textContent;
  try { D = raw.trim() ? JSON.parse(raw) : null; } catch (e) {
    return [`the qkv-data block is not valid JSON: ${e.message}`];
  }
  if (D === null) return ['the page holds no data: write it with qkv view CKPT (--text STR | --example N) --out FILE.html'];
  const errs = checkSaved(D);
  if (errs.length) return errs;
  S.saved = D;
  document.body.classList.add('saved');
  document.title = (D.title ? D.title + ' · ' : '') + 'qkv studio';
  $('saved-note').hidden = false;
  $('tabs').querySelector('[data-tab="patch"]').hidden = true;
  $('tab-train').hidden = !D.snapshots;
  $('text').readOnly = true;
  if (D.snapshots) S.runInfo = savedRun(D);
  return [];
}
async function start() {
  wire();
  let lang = 'en';
  try { lang = localStorage.getItem('qkv-studio-lang') || ''; } catch (e) { lang = ''; }
  if (!lang) lang = /^zh/i.test(navigator.language || '') ? 'zh' : 'en';
  const node = $('qkv-data');
  const problems = node ? startSaved(node) : [];
  applyLang(lang);
  if (problems.length) { showProblems(problems); H.ready = true; return; }
  if (!S.saved) { loadModels(); return; }
  // A saved page is ready once everything it shows is drawn (a served one after its first explanation).
  await loadModels();
  await S.analyzing;
  await S.headsDone;
  H.ready = true;
}
if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
else start();
})();
