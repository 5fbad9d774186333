// What tests, benchmarks and curious users can inspect as window.betcode.stats: every
// sequence received (before de-duplication), and when each approval was first on screen.
export const stats = {
  received: [] as number[],
  gaps: 0,
  connects: 0,
  caughtUp: false,
  shown: {} as Record<string, number>,
  interactiveAt: 0, // ms since navigation start: the open session's recent part on screen
};
