// The daemon as a client on another gRPC stack sees it: @grpc/grpc-js, on Node's own HTTP/2.
//   node client.js PROTO_ROOT ADDRESS version
//   node client.js PROTO_ROOT ADDRESS converse WORKING_DIRECTORY PROMPT
//   node client.js PROTO_ROOT ADDRESS resume SESSION_ID
//   node client.js PROTO_ROOT ADDRESS unknown SESSION_ID
// Prints one JSON line of what it saw; exits 1 on anything unexpected.
"use strict";
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const [protoRoot, address, command, ...args] = process.argv.slice(2);
const definition = loader.loadSync(["betcode/v1/agent.proto", "betcode/v1/version.proto"], {
  includeDirs: [protoRoot],
  keepCase: true,
  oneofs: true,
  longs: Number,
});
const betcode = grpc.loadPackageDefinition(definition).betcode.v1;
const credentials = grpc.credentials.createInsecure();
const agent = new betcode.AgentService(address, credentials);
const deadline = () => Date.now() + 60_000;

function done(result) {
  console.log(JSON.stringify(result));
  grpc.closeClient(agent);
  process.exit(0);
}

function fail(message) {
  console.error(message);
  process.exit(1);
}

function statusOf(error) {
  // The status a call failed with: code, message and trailing metadata (-bin values base64).
  const trailers = {};
  for (const [key, values] of Object.entries(error.metadata.getMap())) {
    trailers[key] = Buffer.isBuffer(values) ? values.toString("base64") : String(values);
  }
  return { code: error.code, details: error.details, trailers };
}

// A streaming call: whether its headers came before any event, and every event's kind.
function watch(call, onEvent) {
  const seen = { headers_first: null, events: [] };
  call.on("metadata", () => {
    if (seen.headers_first === null) seen.headers_first = true;
  });
  call.on("data", (event) => {
    if (seen.headers_first === null) seen.headers_first = false;
    seen.events.push({ sequence: event.sequence, kind: event.event });
    onEvent(event);
  });
  return seen;
}

const commands = {
  version() {
    const client = new betcode.VersionService(address, credentials);
    client.GetVersion({}, { deadline: deadline() }, (error, answer) => {
      if (error) fail(error.message);
      done({ api_version: answer.api_version, server_version: answer.server_version });
    });
  },

  converse(workingDirectory, prompt) {
    const call = agent.Converse(new grpc.Metadata(), { deadline: deadline() });
    let sessionId = null;
    const seen = watch(call, (event) => {
      if (event.event === "session_info" && sessionId === null) {
        sessionId = event.session_info.session_id;
        call.write({ message: { content: prompt } });
      } else if (event.event === "turn_complete") {
        call.cancel();
        done({ session_id: sessionId, ...seen });
      }
    });
    call.on("error", (error) => {
      if (error.code !== grpc.status.CANCELLED) fail(error.message);
    });
    call.write({ start: { working_directory: workingDirectory } });
  },

  resume(sessionId) {
    const call = agent.ResumeSession({ session_id: sessionId }, { deadline: deadline() });
    const seen = watch(call, () => {});
    call.on("error", (error) => fail(error.message));
    call.on("end", () => done(seen));
  },

  unknown(sessionId) {
    // The same refusal on a unary call and on a server stream.
    agent.RenameSession({ session_id: sessionId, name: "x" }, (unaryError) => {
      if (!unaryError) fail("RenameSession of an unknown session succeeded");
      const call = agent.ResumeSession({ session_id: sessionId });
      call.on("data", () => fail("an event of an unknown session"));
      call.on("error", (streamError) =>
        done({ unary: statusOf(unaryError), stream: statusOf(streamError) }),
      );
    });
  },
};

if (!(command in commands)) fail(`unknown command ${command}`);
commands[command](...args);
