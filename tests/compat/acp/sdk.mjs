// Loads the pinned @agentclientprotocol/sdk from $ACP_NODE_MODULES (installed by run-acp into
// .cache/), and fails the calling script on any frame the SDK's schema checks reject: the SDK
// reports those with console.error ("Invalid message", "Error handling notification").
import { pathToFileURL } from "node:url";
import { join } from "node:path";

const root = process.env.ACP_NODE_MODULES;
if (!root) throw new Error("ACP_NODE_MODULES is not set");
export const acp = await import(pathToFileURL(join(root, "@agentclientprotocol/sdk/dist/v1/stable/acp.js")).href);

export const schemaErrors = [];
const original = console.error;
console.error = (...args) => {
  const text = args.map((a) => (typeof a === "string" ? a : JSON.stringify(a))).join(" ");
  if (/Invalid message|Error handling notification|Invalid params/.test(text)) schemaErrors.push(text);
  original(...args);
};

let passed = 0;
export function check(cond, what) {
  if (!cond) throw new Error(`check failed: ${what}`);
  passed += 1;
  console.log(`ok - ${what}`);
}

export async function run(main) {
  const timer = setTimeout(() => {
    console.log(`FAILED: timed out\n${passed} passed, 1 failed`);
    process.exit(1);
  }, 240_000);
  try {
    await main();
    check(schemaErrors.length === 0, `no frame failed the SDK's schema checks (${schemaErrors.join("; ")})`);
    console.log(`${passed} passed, 0 failed`);
    clearTimeout(timer);
    process.exit(0);
  } catch (e) {
    console.log(`FAILED: ${e?.stack ?? e}`);
    console.log(`${passed} passed, 1 failed`);
    process.exit(1);
  }
}
