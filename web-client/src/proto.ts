// The few protobuf messages the web client reads and writes by hand through a relay (betcode.v1;
// docs/RELAY.md, docs/WEB.md): length-delimited and varint fields of protobuf's wire format,
// nothing more.
export class ProtoError extends Error {}

export function concat(...parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

function varint(value: number): Uint8Array {
  const out: number[] = [];
  while (value > 0x7f) {
    out.push((value & 0x7f) | 0x80);
    value = Math.floor(value / 128);
  }
  out.push(value);
  return Uint8Array.from(out);
}

/** A message of bytes, string and unsigned integer fields (empty ones and zeros left out, as
 * protobuf does). */
export function encodeMessage(fields: [number, Uint8Array | string | number][]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const [field, raw] of fields) {
    if (typeof raw === "number") {
      if (raw) parts.push(varint(field << 3), varint(raw));
      continue;
    }
    const value = typeof raw === "string" ? new TextEncoder().encode(raw) : raw;
    if (value.length) parts.push(varint((field << 3) | 2), varint(value.length), value);
  }
  return concat(...parts);
}

/** A length-delimited field written even when empty: a `oneof` member's presence is its value
 * (an empty text frame is still a text frame). */
export function presentField(field: number, value: Uint8Array | string): Uint8Array {
  const bytes = typeof value === "string" ? new TextEncoder().encode(value) : value;
  return concat(varint((field << 3) | 2), varint(bytes.length), bytes);
}

/** A `map<string, string>` field's entries (each a message {key = 1, value = 2}). */
export function mapEntries(field: number, map: Record<string, string>): [number, Uint8Array][] {
  return Object.entries(map).map(([key, value]) => [
    field,
    concat(presentField(1, key), encodeMessage([[2, value]])),
  ]);
}

export interface Field {
  field: number;
  bytes?: Uint8Array; // length-delimited
  number?: number; // varint
}

/** Every field of a message, in order (repeated ones repeat); fixed-width ones are skipped. */
export function decodeMessage(data: Uint8Array): Field[] {
  const fields: Field[] = [];
  let at = 0;
  const read = (): number => {
    let value = 0;
    for (let shift = 1; ; shift *= 128) {
      if (at >= data.length) throw new ProtoError("a truncated message");
      const byte = data[at++];
      value += (byte & 0x7f) * shift;
      if (byte < 0x80) return value;
    }
  };
  while (at < data.length) {
    const key = read();
    const field = Math.floor(key / 8);
    switch (key & 7) {
      case 0:
        fields.push({ field, number: read() });
        break;
      case 1:
        at += 8;
        break;
      case 5:
        at += 4;
        break;
      case 2: {
        const length = read();
        if (at + length > data.length) throw new ProtoError("a truncated message");
        fields.push({ field, bytes: data.subarray(at, at + length) });
        at += length;
        break;
      }
      default:
        throw new ProtoError("an unknown wire type");
    }
    if (at > data.length) throw new ProtoError("a truncated message");
  }
  return fields;
}

export function bytesOf(fields: Field[], field: number): Uint8Array {
  return fields.find((f) => f.field === field)?.bytes ?? new Uint8Array();
}

export function numberOf(fields: Field[], field: number): number {
  return fields.find((f) => f.field === field)?.number ?? 0;
}

/** A `map<string, string>` field, read back. */
export function mapOf(fields: Field[], field: number): Record<string, string> {
  const map: Record<string, string> = {};
  for (const entry of fields) {
    if (entry.field !== field || !entry.bytes) continue;
    const pair = decodeMessage(entry.bytes);
    map[textOf(pair, 1)] = textOf(pair, 2);
  }
  return map;
}

export function textOf(fields: Field[], field: number): string {
  return new TextDecoder().decode(bytesOf(fields, field));
}

/** The string values of a google.protobuf.Struct (map<string, Value> fields = 1; a Value's
 * string_value is its field 3); other kinds of value are left out. */
export function structStrings(data: Uint8Array): Map<string, string> {
  const strings = new Map<string, string>();
  for (const entry of decodeMessage(data)) {
    if (entry.field !== 1 || !entry.bytes) continue;
    const pair = decodeMessage(entry.bytes);
    const value = decodeMessage(bytesOf(pair, 2));
    if (value.some((f) => f.field === 3)) strings.set(textOf(pair, 1), textOf(value, 3));
  }
  return strings;
}
