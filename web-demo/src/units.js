// How the page writes a time. A scene's time counts ticks: in the scenes, and in a recording
// whose header does not say otherwise, a tick is one second (today's scenes are told in
// seconds); a recording's header may say how long its tick is (`tick_ms`: a cluster's export
// says 1, its logical clock counts milliseconds). Every function here is exact: a time is
// written in ms, or in s with as many decimals as it has, never rounded. Plain ES module, no
// DOM. Cost: O(1) per time, O(labels) per axis.

/** A tick's length when nothing says otherwise: one second. */
export const DEFAULT_TICK_MS = 1000;

const wholeSeconds = (tickMs) => tickMs % 1000 === 0;

/** `ticks` as a time: "12 s" in whole-second ticks, else "250 ms" below a second, "1.5 s" from one on. */
export function fmtTime(ticks, tickMs = DEFAULT_TICK_MS) {
  const ms = ticks * tickMs;
  return wholeSeconds(tickMs) || ms >= 1000 ? `${ms / 1000} s` : `${ms} ms`;
}

/** The same, with the unit spelled out (for screen readers): "12 seconds", "250 milliseconds". */
export function fmtTimeLong(ticks, tickMs = DEFAULT_TICK_MS) {
  const ms = ticks * tickMs;
  return wholeSeconds(tickMs) || ms >= 1000 ? `${ms / 1000} seconds` : `${ms} milliseconds`;
}

/** How many ticks `seconds` of real time are (at least one): a timeline window's length. */
export const ticksFor = (seconds, tickMs = DEFAULT_TICK_MS) => Math.max(1, Math.round((seconds * 1000) / tickMs));

const axisLabel = (ms) => (ms === 0 ? '0' : ms < 1000 ? `${ms}ms` : `${ms / 1000}s`);

/**
 * The labelled times of a time axis over [t0, T] (ticks): `[{t, label}]`. In one-second
 * ticks, every 5 s (every 10 s past a minute), labelled "30s" as always; in any other tick,
 * the smallest step of 1, 2 or 5 × 10^k ms that gives at most `most` labels, labelled "250ms"
 * below a second and "1.5s" from one on.
 */
export function axisTicks(t0, T, tickMs = DEFAULT_TICK_MS, most = 12) {
  const out = [];
  if (tickMs === DEFAULT_TICK_MS) {
    const step = T - t0 > 60 ? 10 : 5;
    for (let t = Math.ceil(t0 / step) * step; t <= T; t += step) out.push({ t, label: `${t}s` });
    return out;
  }
  const from = t0 * tickMs;
  const to = T * tickMs;
  let step = 1;
  for (let k = 0; ; k += 1) {
    const s = [1, 2, 5][k % 3] * 10 ** Math.floor(k / 3);
    if ((to - from) / s <= most) {
      step = s;
      break;
    }
  }
  // At most `most` + 1 labels fit the step; the count bounds the loop too, so a time past
  // 2^53 ms (where `n += 1` may leave `n * step` as it was) cannot keep it going.
  for (let n = Math.ceil(from / step); n * step <= to && out.length <= most; n += 1) out.push({ t: (n * step) / tickMs, label: axisLabel(n * step) });
  return out;
}
