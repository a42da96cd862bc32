// Generates tokref.json: a corpus of texts per content class and their
// token counts in o200k_base (the tokenizer of gpt-4o and later OpenAI
// models), which TestEstimatorError compares the estimator with.
//
//	npm ci && node gen.mjs > tokref.json
//
// The texts come from a fixed seed, so the output is the same on every run;
// the Go test reads the texts from the file, never from this script.
import { countTokens } from 'gpt-tokenizer/encoding/o200k_base';

// mulberry32: a small seeded generator, so that the corpus needs no
// dependency and never changes.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const rand = rng(20261206);
const pick = (xs) => xs[Math.floor(rand() * xs.length)];
const int = (lo, hi) => lo + Math.floor(rand() * (hi - lo + 1));

const words = `the report names regions owners each service and of to in for with on
by from that this which when where what how why who all any some most many few
order customer invoice payment shipment warehouse account region status error
request response deadline budget agent model tool call result page file record
update delete create read search list check found missing pending shipped late
returned refund total amount price cost month week year day team manager review
approved rejected because after before while during until since although however
therefore first second third next last final new old large small high low fast
slow clear open closed ready waiting running stopped failed succeeded retried
London Paris Berlin Tokyo Madrid Chicago Toronto Sydney Mumbai Nairobi`.split(/\s+/);

function sentence() {
  const n = int(6, 22);
  const ws = [];
  for (let i = 0; i < n; i++) ws.push(pick(words));
  if (rand() < 0.3) ws.splice(int(1, n - 1), 0, String(int(2, 98000)));
  ws[0] = ws[0][0].toUpperCase() + ws[0].slice(1);
  return ws.join(' ') + pick(['.', '.', '.', '?', '!', ';', ':']) ;
}

// Prose is drawn from paragraphs of the kind agents exchange (tasks,
// findings, replies), in an order the seed picks: random words would
// tokenize as no English text does.
const paragraphs = [
  'Please review the quarterly shipping report and tell me which regions missed their delivery targets. For each one, list the warehouse, the number of late orders and the most common reason given by the carrier. If a region has fewer than ten orders, leave it out of the summary.',
  'I checked the three invoices you mentioned. Two of them were paid on time, but the one from March is still marked as pending because the bank rejected the transfer. The customer was notified on April 2nd and has not replied yet.',
  'The deployment failed at the database migration step. The logs show a timeout while the new index was being built on the orders table, which holds about forty million rows. Rolling back restored the previous version, and the service has been healthy since.',
  "Here's what I found so far: the refund policy allows returns within thirty days, but items bought during the holiday sale can be returned until the end of January. The customer's order was placed on December 14th, so the request is within the window.",
  'Our team would like to move the weekly review from Tuesday afternoon to Thursday morning, starting next month. Could you confirm whether the new time works for the managers in Toronto and Madrid, and update the shared calendar if it does?',
  'To answer your question, I will first search the knowledge base for articles about password resets, then read the two most relevant ones and summarise the steps. If none of them covers accounts with two-factor authentication, I will say so.',
  "Unfortunately the supplier can't deliver the replacement parts before the 20th. I've asked them for a partial shipment of the most urgent items, and they expect to answer by Friday. In the meantime, the repair team will keep using the spare units from the Chicago warehouse.",
  'The budget for the project is almost spent: about 85 percent of the allocated hours have been used, while roughly two thirds of the planned work is done. The biggest overrun came from the integration tests, which took twice as long as estimated.',
  'Summary of the call with the customer: they are happy with the product overall, but the monthly report takes too long to generate and sometimes times out. They asked whether we could send it by email instead. I promised a reply by the end of the week.',
  'I could not find a file named config.yaml in the repository. There is a config.example.yaml in the root folder and a settings directory with environment-specific overrides. Should I create the missing file from the example, or use one of the overrides?',
  'Based on the data you provided, average response times increased from 180 milliseconds to 420 milliseconds after the update on Monday. The slowdown affects only requests that read from the search index, which suggests the new ranking step is the cause.',
  'Thanks for your patience. The order has been shipped with express delivery and should arrive within two business days. You will receive a tracking number by email as soon as the carrier picks up the parcel from our warehouse in Rotterdam.',
  'Before making any changes, I want to make sure I understand the goal. You would like every new employee to get access to the shared drive, the ticketing system and the internal wiki on their first day, without waiting for a manual approval. Is that right?',
  'The analysis is complete. Sales grew by 12 percent year over year, driven mostly by the new subscription plan, while one-time purchases declined slightly. Churn stayed flat at around 3 percent per month. The detailed tables are attached below.',
];

function prose(size) {
  let s = '';
  const order = paragraphs.map((p) => [rand(), p]).sort((a, b) => a[0] - b[0]).map(([, p]) => p);
  for (let i = 0; s.length < size; i++) s += (s ? '\n\n' : '') + order[i % order.length];
  return s;
}

const names = ['Ada Lovelace', 'Grace Hopper', 'Alan Turing', 'Edsger Dijkstra', 'Barbara Liskov', 'Ken Thompson', 'Frances Allen'];
const statuses = ['pending', 'shipped', 'delivered', 'returned', 'cancelled'];
function record(i) {
  const r = {
    id: `ord_${(int(0, 2 ** 30)).toString(36)}${int(100, 999)}`,
    customer: { name: pick(names), email: `user${int(1, 9999)}@example.com`, tier: pick(['free', 'pro', 'enterprise']) },
    status: pick(statuses),
    total: Math.round(rand() * 100000) / 100,
    currency: pick(['USD', 'EUR', 'GBP', 'JPY']),
    created_at: `2026-${String(int(1, 12)).padStart(2, '0')}-${String(int(1, 28)).padStart(2, '0')}T${String(int(0, 23)).padStart(2, '0')}:${String(int(0, 59)).padStart(2, '0')}:00Z`,
    items: Array.from({ length: int(1, 3) }, () => ({ sku: `SKU-${int(10000, 99999)}`, qty: int(1, 12), unit_price: Math.round(rand() * 5000) / 100 })),
    tracking: rand() < 0.5 ? null : `1Z${int(100000, 999999)}${int(100000, 999999)}`,
    note: rand() < 0.4 ? sentence() : '',
    seq: i,
  };
  return r;
}

function jsonOutput(size) {
  const recs = [];
  const pretty = rand() < 0.5;
  let s = '';
  while (s.length < size) {
    recs.push(record(recs.length));
    s = JSON.stringify({ results: recs, next_cursor: recs.length > 2 ? `c_${recs.length}` : null }, null, pretty ? 2 : 0);
  }
  return s;
}

const idents = ['ctx', 'req', 'resp', 'order', 'items', 'total', 'err', 'buf', 'limit', 'budget', 'runID', 'ledger', 'key', 'value', 'count'];
const types = ['int64', 'string', 'error', '[]byte', 'bool', 'time.Duration', '*Order', 'map[string]int'];
function goFunc() {
  const name = pick(['load', 'settle', 'reserve', 'parse', 'render', 'check', 'merge', 'split']) + pick(['Order', 'Budget', 'Ledger', 'Items', 'Run', 'Call']);
  const a = pick(idents), b = pick(idents);
  const lines = [
    `// ${name} ${pick(['returns', 'checks', 'builds', 'reads'])} the ${pick(words)} ${pick(words)} of ${pick(words)}.`,
    `func ${name}(${a} ${pick(types)}, ${b} ${pick(types)}) (${pick(types)}, error) {`,
    `\tif ${a} == nil {`,
    `\t\treturn nil, fmt.Errorf("${name}: %w", errMissing)`,
    `\t}`,
    `\tfor i := 0; i < len(${b}); i++ {`,
    `\t\t${pick(idents)} += ${b}[i] * ${int(2, 1000)}`,
    `\t}`,
  ];
  if (rand() < 0.5) lines.push(`\tswitch ${a}.Status {`, `\tcase "${pick(statuses)}", "${pick(statuses)}":`, `\t\treturn ${pick(idents)}, nil`, `\t}`);
  lines.push(`\treturn ${pick(idents)}, nil`, '}');
  return lines.join('\n');
}
function pyFunc() {
  const name = pick(['load', 'settle', 'reserve', 'parse', 'render']) + '_' + pick(['order', 'budget', 'ledger', 'items']);
  return [
    `def ${name}(${pick(idents)}, ${pick(idents)}=None):`,
    `    """${sentence()}"""`,
    `    result = {"status": "${pick(statuses)}", "count": ${int(0, 500)}}`,
    `    for item in ${pick(idents)}:`,
    `        if item.get("qty", 0) > ${int(1, 20)}:`,
    `            result["count"] += item["qty"]`,
    `    return result`,
  ].join('\n');
}
function code(size) {
  let s = '';
  while (s.length < size) s += (s ? '\n\n' : '') + (rand() < 0.6 ? goFunc() : pyFunc());
  return s;
}

const zh = ['报告', '列出', '每个', '服务', '的', '区域', '和', '负责人', '订单', '客户', '发票', '付款', '已经', '发货', '仓库', '账户', '状态', '错误',
  '请求', '响应', '截止日期', '预算', '我们', '需要', '检查', '结果', '文件', '记录', '更新', '删除', '创建', '读取', '搜索', '因为', '所以', '但是',
  '如果', '然后', '今天', '明天', '上海', '北京', '东京', '团队', '经理', '审核', '通过', '拒绝', '问题', '解决', '时间', '数据', '系统', '用户'];
const ja = ['報告書', 'には', '各', 'サービス', 'の', '地域', 'と', '担当者', 'が', '記載', 'されて', 'います', '注文', '顧客', '請求書', '支払い',
  '発送', '済み', '倉庫', '状態', 'エラー', '確認', 'して', 'ください', '結果', 'ファイル', '更新', '削除', '作成', '検索', '東京', '大阪'];
function cjk(size) {
  let s = '';
  while (s.length < size) {
    const lang = rand() < 0.65 ? zh : ja;
    const n = int(5, 16);
    for (let i = 0; i < n; i++) s += pick(lang);
    if (rand() < 0.2) s += String(int(1, 9999));
    s += lang === zh ? pick(['。', '，', '？', '；']) : pick(['。', '、']);
  }
  return s;
}

const paramTypes = ['string', 'integer', 'number', 'boolean', 'array', 'enum', 'object'];
function param() {
  const t = pick(paramTypes);
  const p = rand() < 0.7 ? { description: sentence() } : {};
  switch (t) {
    case 'enum': return { type: 'string', enum: statuses.slice(0, int(2, 5)), ...p };
    case 'array': return { type: 'array', items: { type: pick(['string', 'integer']) }, ...p };
    case 'object': return { type: 'object', properties: { [pick(idents)]: { type: 'string' }, [pick(idents) + '_2']: { type: 'integer' } }, ...p };
    default: return { type: t, ...p };
  }
}
function toolDefs(n) {
  const tools = [];
  for (let i = 0; i < n; i++) {
    const props = {};
    const k = int(1, 5);
    for (let j = 0; j < k; j++) props[`${pick(idents)}_${j}`] = param();
    const names = Object.keys(props);
    tools.push({
      type: 'function',
      function: {
        name: `${pick(['search', 'read', 'update', 'list', 'create'])}_${pick(['orders', 'invoices', 'pages', 'files', 'tickets'])}_${i}`,
        description: Array.from({ length: int(1, 3) }, sentence).join(' '),
        parameters: { type: 'object', properties: props, required: names.slice(0, int(0, names.length)) },
      },
    });
  }
  return tools;
}

// renderTools is how OpenAI presents function definitions to the model (a
// TypeScript namespace), as the openai-chat-tokens package reconstructs it;
// its count plus 9 is what the tools add to a request's prompt tokens.
function renderTools(tools) {
  const lines = ['namespace functions {', ''];
  for (const { function: f } of tools) {
    if (f.description) lines.push(`// ${f.description}`);
    if (Object.keys(f.parameters?.properties ?? {}).length > 0) {
      lines.push(`type ${f.name} = (_: {`);
      lines.push(renderProps(f.parameters, 0));
      lines.push('}) => any;');
    } else {
      lines.push(`type ${f.name} = () => any;`);
    }
    lines.push('');
  }
  lines.push('} // namespace functions');
  return lines.join('\n');
}
function renderProps(obj, indent) {
  const lines = [];
  for (const [name, p] of Object.entries(obj.properties ?? {})) {
    if (p.description && indent < 2) lines.push(`// ${p.description}`);
    const opt = obj.required?.includes(name) ? '' : '?';
    lines.push(`${name}${opt}: ${renderType(p, indent)},`);
  }
  return lines.map((l) => ' '.repeat(indent) + l).join('\n');
}
function renderType(p, indent) {
  switch (p.type) {
    case 'string': return p.enum ? p.enum.map((v) => `"${v}"`).join(' | ') : 'string';
    case 'integer': case 'number': return p.enum ? p.enum.map(String).join(' | ') : 'number';
    case 'boolean': return 'boolean';
    case 'null': return 'null';
    case 'object': return ['{', renderProps(p, indent + 2), '}'].join('\n');
    case 'array': return p.items ? `${renderType(p.items, indent)}[]` : 'any[]';
  }
  return 'any';
}

// message is what one chat message costs in prompt tokens (OpenAI's
// cookbook): 3 for its framing, its role, its content; the reply is primed
// with 3 more.
const message = (role, content) => 3 + countTokens(role) + countTokens(content);
const priming = 3;

// Each sample is the content of one user message, or tool definitions
// offered with the user message "Go."; request_tokens is the prompt tokens
// of that request.
const sizes = [150, 300, 600, 1000, 1500, 2200, 3000, 4200];
const samples = [];
for (const [cls, gen] of [['prose', prose], ['json', jsonOutput], ['code', code], ['cjk', cjk]]) {
  for (const size of sizes) {
    const text = gen(size);
    samples.push({ class: cls, text, request_tokens: message('user', text) + priming });
  }
}
for (const n of [1, 2, 3, 5, 8, 12]) {
  const tools = toolDefs(n);
  samples.push({ class: 'tools', tools, request_tokens: message('user', 'Go.') + priming + countTokens(renderTools(tools)) + 9 });
}

process.stdout.write(JSON.stringify({ tokenizer: 'o200k_base (npm gpt-tokenizer 4.0.0)', samples }, null, 1) + '\n');
