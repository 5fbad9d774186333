// The relay login's tokens (docs/WEB.md "Through the relay"): kept in the page's localStorage
// and, for the service worker, in IndexedDB. Either may renew them (the relay rotates the
// refresh token at each use), so each takes the newer of the two before renewing.
import { idbDelete, idbGet, idbPut } from "./idb";

export const TOKENS = "betcode-relay-tokens";
export const REFRESH_AHEAD_MS = 60_000; // the access token is renewed a minute before it expires

export interface Tokens {
  access_token: string;
  refresh_token: string; // "" until the relay gives one: the login then lasts one token
  expires_at: number; // ms since the epoch
}

/** What `/relay/api/login`, `/refresh` and `/pair` answer. */
export interface TokenReply {
  access_token: string;
  refresh_token?: string;
  expires_in_secs?: number;
}

export function tokensOf(reply: TokenReply, previous: Tokens | null): Tokens {
  return {
    access_token: reply.access_token,
    refresh_token: reply.refresh_token || previous?.refresh_token || "",
    expires_at: Date.now() + (reply.expires_in_secs || 900) * 1000,
  };
}

export async function sharedTokens(): Promise<Tokens | null> {
  const tokens = await idbGet<Tokens>(TOKENS);
  return tokens && tokens.access_token ? tokens : null;
}

export function shareTokens(tokens: Tokens | null): Promise<void> {
  return tokens ? idbPut(TOKENS, tokens) : idbDelete(TOKENS);
}

/** The later of two copies of the login (the one renewed last). */
export function newer(a: Tokens | null, b: Tokens | null): Tokens | null {
  if (!a || !b) return a ?? b;
  return b.expires_at > a.expires_at ? b : a;
}
