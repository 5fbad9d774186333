// The per-event streams as a client on another gRPC stack sees them: @grpc/grpc-js, which
// speaks HTTP/2 through Node's own (nghttp2) and reads every message on one thread.
//   node client.js replay PROTO_ROOT ADDRESS SESSION_ID
//   node client.js watch PROTO_ROOT ADDRESS SESSION_ID AFTER_SEQUENCE
// Prints one JSON line of figures (watch: first {"ready": true} once the call is accepted).
"use strict";
const grpc = require("@grpc/grpc-js");
const loader = require("@grpc/proto-loader");

const [role, protoRoot, address, sessionId, after] = process.argv.slice(2);
const definition = loader.loadSync("betcode/v1/agent.proto", {
  includeDirs: [protoRoot],
  keepCase: true,
  oneofs: true,
});
const betcode = grpc.loadPackageDefinition(definition).betcode.v1;
const client = new betcode.AgentService(address, grpc.credentials.createInsecure(), {
  "grpc.max_receive_message_length": 16 * 1024 * 1024,
});

const request = { session_id: sessionId, from_sequence: role === "watch" ? Number(after) : 0 };
if (role === "watch") request.follow = true;
const call = client.ResumeSession(request);
const cpuAtStart = process.cpuUsage();
const startedNs = process.hrtime.bigint();
let events = 0;

function report(extra) {
  const cpu = process.cpuUsage(cpuAtStart);
  const seconds = Number(process.hrtime.bigint() - startedNs) / 1e9;
  console.log(JSON.stringify({ events, seconds, cpu_s: (cpu.user + cpu.system) / 1e6, ...extra }));
}

call.on("metadata", () => {
  if (role === "watch") console.log(JSON.stringify({ ready: true }));
});
call.on("data", (event) => {
  events += 1;
  if (role === "watch" && event.event === "turn_complete") {
    // CLOCK_MONOTONIC, as the Python driver's time.monotonic_ns(): the same clock.
    report({ done_ns: Number(process.hrtime.bigint()) });
    call.cancel();
    client.close();
  }
});
call.on("error", (error) => {
  if (error.code !== grpc.status.CANCELLED) {
    console.error(error.message);
    process.exit(1);
  }
});
call.on("end", () => {
  if (role === "replay") report({});
  client.close();
});
