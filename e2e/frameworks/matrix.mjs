// The framework matrix: each framework runs the same four agent checks
// against the gateway (HALTLINE_GATEWAY_URL) in front of the scripted model
// of e2e TestFrameworkMatrix, and reports the facts of each check on a line
// "RESULT {json}". The Go test judges them and prints the table.
//
// Only the base URL (and, where a check sets a budget, X-Run-Budget) is
// changed from the frameworks' own quick-start code.
import { generateText, streamText, stepCountIs, tool as aiTool } from "ai";
import { createOpenAI } from "@ai-sdk/openai";
import { createAnthropic } from "@ai-sdk/anthropic";
import { createAgent, tool as lcTool } from "langchain";
import { ChatOpenAI } from "@langchain/openai";
import { ChatAnthropic } from "@langchain/anthropic";
import { agent as liAgent } from "@llamaindex/workflow";
import { OpenAI as LiOpenAI } from "@llamaindex/openai";
import { tool as liTool } from "llamaindex";
import { z } from "zod";

const GW = process.env.HALTLINE_GATEWAY_URL;
const ADMIN = process.env.HALTLINE_ADMIN_URL;
if (!GW || !ADMIN) {
  console.error("HALTLINE_GATEWAY_URL and HALTLINE_ADMIN_URL are set by e2e TestFrameworkMatrix");
  process.exit(2);
}
const OPENAI_KEY = "sk-agent-frameworks";
const ANTHROPIC_KEY = "sk-ant-agent-frameworks";

// The checks: the scripted model's script, and the run headers sent.
const CHECKS = {
  grouped: { script: "tool3", headers: {} },
  max_steps: { script: "tool5", headers: { "X-Run-Budget": "max_steps=3" } },
  loop: { script: "loop", headers: {} },
  default_tokens: { script: "tool3", headers: { "X-Run-Budget": "max_tokens=50000" } },
};

const prompt = (check, id) => `Read the report page by page, then summarise it. [script:${CHECKS[check].script}] (#${id})`;
const pageArgs = z.object({ page: z.number().describe("page number, from 1") });

async function runIds() {
  const r = await fetch(ADMIN + "/api/v1/runs");
  const b = await r.json();
  return b.runs || [];
}

// newRuns are the runs created since before, once none is deciding (a
// streamed call settles just after the client saw its end).
async function newRuns(before) {
  const seen = new Set(before.map((r) => r.tenant + "/" + r.run_id));
  for (let i = 0; ; i++) {
    const runs = (await runIds()).filter((r) => !seen.has(r.tenant + "/" + r.run_id));
    if (i >= 100 || !runs.some((r) => r.status === "deciding")) {
      return runs.map(({ run_id, status, reason, agent_steps }) => ({ run_id, status, reason, agent_steps }));
    }
    await new Promise((res) => setTimeout(res, 50));
  }
}

let seq = 0;

// check runs one agent (run: (prompt, headers, readPage) => final text) and
// prints its facts; the prompt carries the agent's id for the scripted model.
async function check(framework, name, run) {
  const before = await runIds();
  const id = "js" + ++seq;
  const out = { framework, check: name, prompt_id: id, returned: false, error: "", text: "", tool_runs: 0 };
  const readPage = async ({ page }) => {
    out.tool_runs++;
    return `Page ${page}: quarterly numbers, nothing unusual.`;
  };
  try {
    out.text = String((await run(prompt(name, id), CHECKS[name].headers, readPage)) ?? "");
    out.returned = true;
  } catch (e) {
    out.error = String((e && (e.stack || e.message)) || e).slice(0, 600);
  }
  out.runs = await newRuns(before);
  console.log("RESULT " + JSON.stringify(out));
}

async function all(framework, run) {
  for (const name of Object.keys(CHECKS)) await check(framework, name, run);
}

// Vercel AI SDK: generateText and streamText with each provider.
const aiTools = (readPage) => ({
  read_page: aiTool({ description: "Read one page of the report.", inputSchema: pageArgs, execute: readPage }),
});
const aiProviders = {
  "openai.chat": (headers) => createOpenAI({ baseURL: GW + "/v1", apiKey: OPENAI_KEY, headers }).chat("gpt-4o-mini"),
  "openai.responses": (headers) => createOpenAI({ baseURL: GW + "/v1", apiKey: OPENAI_KEY, headers }).responses("gpt-4o-mini"),
  // It posts to {baseURL}/messages: the gateway answers there as on /v1/messages.
  anthropic: (headers) => createAnthropic({ baseURL: GW, apiKey: ANTHROPIC_KEY, headers })("claude-haiku-4-5"),
};
for (const [name, model] of Object.entries(aiProviders)) {
  await all(`vercel-ai ${name} generateText`, async (p, headers, readPage) => {
    const r = await generateText({ model: model(headers), tools: aiTools(readPage), stopWhen: stepCountIs(10), maxRetries: 0, prompt: p });
    return r.text;
  });
  await all(`vercel-ai ${name} streamText`, async (p, headers, readPage) => {
    let err = null;
    const r = streamText({ model: model(headers), tools: aiTools(readPage), stopWhen: stepCountIs(10), maxRetries: 0, prompt: p, onError: ({ error }) => { err = error; } });
    const text = await r.text;
    if (err) throw err;
    return text;
  });
}

// Mastra: an Agent over an AI SDK provider instance. Mastra 1.x asks for
// Node 22; it is tried on whatever Node runs this, and reported as not run
// when it does not load.
let mastra = null;
try {
  mastra = { agent: await import("@mastra/core/agent"), tools: await import("@mastra/core/tools") };
} catch (e) {
  for (const name of Object.keys(CHECKS)) {
    console.log("RESULT " + JSON.stringify({ framework: "mastra", check: name, skipped: `does not load on Node ${process.version}: ${e.message}`.slice(0, 200) }));
  }
}
if (mastra) {
  for (const [name, model] of Object.entries({ "openai.chat": aiProviders["openai.chat"], anthropic: aiProviders.anthropic })) {
    await all(`mastra ${name} generate`, async (p, headers, readPage) => {
      const a = new mastra.agent.Agent({
        id: "reader", name: "reader", instructions: "You read reports.", model: model(headers),
        tools: { read_page: mastra.tools.createTool({ id: "read_page", description: "Read one page of the report.", inputSchema: pageArgs, execute: async (input) => readPage(input.context ?? input) }) },
      });
      const r = await a.generate(p, { maxSteps: 10 });
      return r.text;
    });
  }
}

// LangChain JS 1.x: createAgent with ChatOpenAI and ChatAnthropic.
const lcTools = (readPage) => [lcTool(readPage, { name: "read_page", description: "Read one page of the report.", schema: pageArgs })];
const lcModels = {
  ChatOpenAI: (headers) => new ChatOpenAI({ model: "gpt-4o-mini", apiKey: OPENAI_KEY, maxRetries: 0, configuration: { baseURL: GW + "/v1", defaultHeaders: headers } }),
  ChatAnthropic: (headers) => new ChatAnthropic({ model: "claude-haiku-4-5", apiKey: ANTHROPIC_KEY, maxRetries: 0, anthropicApiUrl: GW, clientOptions: { defaultHeaders: headers } }),
};
for (const [name, model] of Object.entries(lcModels)) {
  await all(`langchain createAgent ${name}`, async (p, headers, readPage) => {
    const a = createAgent({ model: model(headers), tools: lcTools(readPage) });
    const r = await a.invoke({ messages: [{ role: "user", content: p }] }, { recursionLimit: 25 });
    const last = r.messages[r.messages.length - 1];
    return typeof last.content === "string" ? last.content : JSON.stringify(last.content);
  });
}

// LlamaIndex TS: agent() over @llamaindex/openai (it always streams).
await all("llamaindex agent openai", async (p, headers, readPage) => {
  // The base URL without /v1: the gateway answers /chat/completions too.
  const llm = new LiOpenAI({ model: "gpt-4o-mini", apiKey: OPENAI_KEY, baseURL: GW, additionalSessionOptions: { defaultHeaders: headers } });
  const a = liAgent({
    llm,
    tools: [liTool({ name: "read_page", description: "Read one page of the report.", parameters: pageArgs, execute: readPage })],
  });
  const r = await a.run(p);
  return r.data.result ?? r.data.message?.content ?? JSON.stringify(r.data);
});
