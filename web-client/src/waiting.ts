// Every request waiting for an answer, in any session: the action bar shows the viewed
// session's oldest (or the oldest of all), the inbox (from the badge) all of them. The daemon's
// list (GET /api/permissions) is the truth; the open session's stream adds and removes its own
// at once, without waiting for a refresh.
import { api, type Waiting } from "./api";

const REFRESH_MS = 4000;

type Listener = () => void;

class WaitingRequests {
  private readonly byId = new Map<string, Waiting>();
  private readonly settled = new Set<string>(); // resolved here before the list caught up
  private readonly listeners: Listener[] = [];
  private refreshing: Promise<void> | null = null;
  private again = false;
  sessionNames = new Map<string, string>();
  sessionPreviews = new Map<string, string>(); // an unnamed session's last message, to tell it by

  onChange(listener: Listener): void {
    this.listeners.push(listener);
  }

  private changed(): void {
    for (const listener of this.listeners) listener();
  }

  get all(): Waiting[] {
    return [...this.byId.values()].sort((a, b) => a.received_at - b.received_at);
  }

  /** What the bar shows: the viewed session's oldest request first, else the oldest of all. */
  first(sessionId: string | null): Waiting | undefined {
    const all = this.all;
    return all.find((request) => request.session_id === sessionId) ?? all[0];
  }

  get count(): number {
    return this.byId.size;
  }

  /** A request seen on the open stream; its rule comes with the next list. */
  add(request: Omit<Waiting, "session_rule" | "rule_known">): void {
    if (this.byId.has(request.request_id) || this.settled.has(request.request_id)) return;
    this.byId.set(request.request_id, { ...request, session_rule: null, rule_known: false });
    this.changed();
    void this.refresh();
  }

  remove(requestId: string): void {
    this.settled.add(requestId);
    if (this.byId.delete(requestId)) this.changed();
  }

  async refresh(): Promise<void> {
    if (this.refreshing) {
      this.again = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.again = false;
        const data = await api<{ waiting: Waiting[] }>("GET", "/api/permissions");
        this.byId.clear();
        for (const row of data.waiting) {
          if (!this.settled.has(row.request_id)) this.byId.set(row.request_id, { ...row, rule_known: true });
        }
        this.changed();
      } while (this.again);
    })().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  start(): void {
    void this.refresh().catch(() => {});
    setInterval(() => void this.refresh().catch(() => {}), REFRESH_MS);
  }
}

export const waiting = new WaitingRequests();
