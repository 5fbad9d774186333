// What the web client's tests drive instead of a browser: a relay call's WebSocket, and the
// storage of pinned keys.
import type { PinStore } from "../src/e2e";
import type { CallSocket } from "../src/transport";

export class FakeSocket implements CallSocket {
  binaryType: BinaryType = "blob";
  onopen: (() => void) | null = null;
  onmessage: ((event: { data: unknown }) => void) | null = null;
  onerror: (() => void) | null = null;
  onclose: (() => void) | null = null;
  readonly sent: (string | Uint8Array)[] = [];
  closed = false;

  constructor(
    readonly url: string,
    readonly protocols: string[],
  ) {}

  send(data: string | Uint8Array): void {
    this.sent.push(data);
  }

  close(): void {
    this.closed = true;
  }

  answer(message: Uint8Array): void {
    this.onmessage?.({ data: message.slice().buffer });
  }

  status(code: string, message = "", more: Record<string, string> = {}): void {
    this.onmessage?.({ data: JSON.stringify({ code, message, ...more }) });
  }
}

export class Pins implements PinStore {
  readonly map = new Map<string, string>();
  getItem(key: string): string | null {
    return this.map.get(key) ?? null;
  }
  setItem(key: string, value: string): void {
    this.map.set(key, value);
  }
}
