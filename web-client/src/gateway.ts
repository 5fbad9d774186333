// The daemon's web gateway (betcode.v1.WebGatewayService, proto/betcode/v1/web_gateway.proto):
// the page's HTTP requests and stream WebSocket as protobuf messages, for a machine reached
// through a relay. The daemon answers them with its own web handlers (docs/WEB.md "Through the
// relay").
import { bytesOf, concat, decodeMessage, encodeMessage, mapEntries, mapOf, numberOf, presentField, textOf } from "./proto";

export const FETCH = "betcode.v1.WebGatewayService/Fetch";
export const SOCKET = "betcode.v1.WebGatewayService/Socket";

/** WebRequest {method = 1; path = 2; map headers = 3; body = 4}. */
export interface WebRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: Uint8Array;
}

/** WebResponse {status = 1; map headers = 2; body = 3}. */
export interface WebResponse {
  status: number;
  headers: Record<string, string>;
  body: Uint8Array;
}

/** WebSocketFrame's oneof: open = 1 (WebSocketOpen {path = 1; map headers = 2; repeated
 * protocols = 3}), text = 2, binary = 3, close = 4 (WebSocketClose {code = 1; reason = 2}). */
export type SocketFrame =
  | { open: { path: string; headers: Record<string, string>; protocols: string[] } }
  | { text: string }
  | { binary: Uint8Array }
  | { close: { code: number; reason: string } };

export function encodeWebRequest(request: WebRequest): Uint8Array {
  return encodeMessage([
    [1, request.method],
    [2, request.path],
    ...mapEntries(3, request.headers),
    [4, request.body],
  ]);
}

export function decodeWebResponse(data: Uint8Array): WebResponse {
  const fields = decodeMessage(data);
  return { status: numberOf(fields, 1), headers: mapOf(fields, 2), body: bytesOf(fields, 3) };
}

export function encodeSocketFrame(frame: SocketFrame): Uint8Array {
  if ("open" in frame) {
    const { path, headers, protocols } = frame.open;
    const open = encodeMessage([[1, path], ...mapEntries(2, headers)]);
    return presentField(1, concat(open, ...protocols.map((name) => presentField(3, name))));
  }
  if ("text" in frame) return presentField(2, frame.text);
  if ("binary" in frame) return presentField(3, frame.binary);
  return presentField(4, encodeMessage([[1, frame.close.code], [2, frame.close.reason]]));
}

/** The frame's oneof member (the last one given wins, as protobuf reads it); null: none set. */
export function decodeSocketFrame(data: Uint8Array): SocketFrame | null {
  const member = decodeMessage(data)
    .filter((f) => f.bytes && f.field >= 1 && f.field <= 4)
    .pop();
  if (!member || !member.bytes) return null;
  const body = member.bytes;
  switch (member.field) {
    case 1: {
      const open = decodeMessage(body);
      const protocols = open.filter((f) => f.field === 3 && f.bytes).map((f) => new TextDecoder().decode(f.bytes));
      return { open: { path: textOf(open, 1), headers: mapOf(open, 2), protocols } };
    }
    case 2:
      return { text: new TextDecoder().decode(body) };
    case 3:
      return { binary: body };
    default: {
      const close = decodeMessage(body);
      return { close: { code: numberOf(close, 1), reason: textOf(close, 2) } };
    }
  }
}
