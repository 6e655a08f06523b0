// The timeline: the recorded inputs of every step, so any point can be recomputed by
// replaying them into a fresh World (fresh wasm cores). Like RaftScope's state.js it can
// rewind, seek and fork: an intervention at step k drops the recorded future and the scene
// script writes a new one from there.

import { World } from './world.js';

const MAX_STEPS = 200;

export class Timeline {
  constructor(api, scene, params) {
    this.api = api;
    this.scene = scene;
    this.params = params;
    this.steps = []; // steps[i] = the records applied during step i
    this.world = null; // the world after `cursor` steps
    this.cursor = 0;
    this.extend(this.fresh());
    this.seek(1);
  }

  fresh() {
    return new World(this.api, this.scene, this.params);
  }

  get length() {
    return this.steps.length;
  }

  /** Runs the scene script from `w` (already at the end of the recorded steps) to its end. */
  extend(w) {
    while (!w.done && this.steps.length < (this.scene.maxSteps ?? MAX_STEPS)) {
      const records = [];
      const emit = (r) => {
        const result = w.apply(r);
        records.push(r);
        return result;
      };
      this.scene.step(w, emit, this.params);
      if (records.length === 0) break;
      this.steps.push(records);
    }
    if (!w.done) {
      const r = { op: 'done' };
      w.apply(r);
      this.steps[this.steps.length - 1].push(r);
    }
    w.dispose();
  }

  /** The world after `k` steps, by replay from scratch. */
  replay(k) {
    const w = this.fresh();
    for (let i = 0; i < k; i += 1) for (const r of this.steps[i]) w.apply(r);
    return w;
  }

  seek(k) {
    k = Math.max(1, Math.min(this.length, k));
    if (this.world && k === this.cursor + 1) {
      for (const r of this.steps[k - 1]) this.world.apply(r); // forward one step: no replay needed
    } else if (!this.world || k !== this.cursor) {
      this.world?.dispose();
      this.world = this.replay(k);
    }
    this.cursor = k;
    return this.world;
  }

  /** Adds records at the current point (a user's intervention) and rewrites the future. */
  intervene(records) {
    const k = this.cursor;
    this.steps = this.steps.slice(0, k);
    // a 'done' (and the outcome's milestone) recorded in this step no longer holds: the
    // future is open again
    const ending = (r) => r.op === 'done' || (r.op === 'milestone' && r.n == null && !r.yours);
    this.steps[k - 1] = this.steps[k - 1].filter((r) => !ending(r)).concat(records);
    this.extend(this.replay(k));
    this.world?.dispose();
    this.world = null;
    this.cursor = 0;
    return this.seek(k);
  }
}
