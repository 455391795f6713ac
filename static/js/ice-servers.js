// ICE servers that stay valid, and what a connection uses.
//
// TURN credentials from GET /v1/ice-servers (TURN REST API, coturn's use-auth-secret) expire `ttl_s` seconds
// after they were minted; coturn refuses an expired one when a client opens a new relay (a new peer
// connection, an ICE restart). An IceRefresher keeps one current configuration: it fetches a fresh one at
// REFRESH_SHARE of the TTL (counted on the page's own clock from when the answer arrived, so a clock skew
// between browser and server does not matter), retries a failed fetch with backoff, and hands every new
// configuration to `onConfig` (the mesh applies it with pc.setConfiguration). Without a TTL (no turn_secret:
// static or no TURN credentials) nothing is scheduled.
//
// selectedPair(report) and turnExpiry(configuration) say what a connection uses: the candidate types of its
// selected pair (getStats) and when its TURN credentials expire.
//
// A configuration is what RtcClient.fetchIceServers returns: {iceServers, iceTransportPolicy, ttlS,
// expiresAt (ms), refreshAfterS, receivedAt (ms, page clock)}. `rtcConfiguration(config)` is its
// RTCConfiguration part.

export const REFRESH_SHARE = 0.8; // the server's REFRESH_AT (rtc_agent/server/ice.py)
export const RETRY_MIN_MS = 2000;
export const RETRY_MAX_MS = 30000;

/** The page's clock; tests pass a fake one with the same three members. */
export const realClock = Object.freeze({
  now: () => Date.now(),
  setTimeout: (fn, ms) => setTimeout(fn, ms),
  clearTimeout: (id) => clearTimeout(id),
});

/** The RTCConfiguration members of a fetched configuration (the bookkeeping fields stay out). */
export function rtcConfiguration(config = {}) {
  const out = { iceServers: config.iceServers || [] };
  if (config.iceTransportPolicy) out.iceTransportPolicy = config.iceTransportPolicy;
  return out;
}

export class IceRefresher {
  /**
   * @param {object} opts
   * @param {object} opts.config                       the configuration fetched at join
   * @param {(() => Promise<object>)|null} [opts.fetchConfig]  fetches a fresh one (null: never refresh)
   * @param {(config: object) => void} [opts.onConfig]  called with every fresh configuration
   * @param {object} [opts.clock]                      {now, setTimeout, clearTimeout}
   */
  constructor({ config = {}, fetchConfig = null, onConfig = () => {}, clock = realClock } = {}) {
    this.clock = clock;
    this.fetchConfig = fetchConfig;
    this.onConfig = onConfig;
    this.config = this._stamp(config);
    this.refreshes = 0; // successful refreshes, for readouts and tests
    this.failures = 0; // failed fetches since the last success
    this._timer = null;
    this._inflight = null;
    this._stopped = false;
  }

  _stamp(config) {
    return { ...config, receivedAt: config.receivedAt ?? this.clock.now() };
  }

  /** Seconds after receipt at which the current configuration is due for a refresh; null when it never is. */
  refreshAfterS() {
    const { ttlS, refreshAfterS } = this.config;
    if (!ttlS) return null;
    return Math.min(refreshAfterS ?? ttlS * REFRESH_SHARE, ttlS * REFRESH_SHARE);
  }

  /** Page-clock time (ms) at which a refresh is due; null when never. */
  dueAt() {
    const after = this.refreshAfterS();
    return after === null ? null : this.config.receivedAt + after * 1000;
  }

  /** Past the refresh point: a new relay should not be opened with these credentials any more. */
  stale() {
    const due = this.dueAt();
    return due !== null && this.clock.now() >= due;
  }

  /** Schedule the next refresh (idempotent). */
  start() {
    this._schedule(this.dueAt());
    return this;
  }

  _schedule(at) {
    if (this._timer !== null) this.clock.clearTimeout(this._timer);
    this._timer = null;
    if (this._stopped || at === null || !this.fetchConfig) return;
    const delay = Math.max(0, at - this.clock.now());
    this._timer = this.clock.setTimeout(() => {
      this._timer = null;
      this.refresh().catch(() => {}); // a failure is retried by refresh itself
    }, delay);
  }

  /** Fetch a fresh configuration now (one fetch at a time); resolves to the current configuration either way.
   * A failure keeps the old one and retries with backoff (RETRY_MIN_MS doubling up to RETRY_MAX_MS). */
  refresh() {
    if (!this.fetchConfig || this._stopped) return Promise.resolve(this.config);
    if (this._inflight) return this._inflight;
    this._inflight = (async () => {
      try {
        const fresh = await this.fetchConfig();
        if (this._stopped) return this.config;
        this.config = { ...(fresh || {}), receivedAt: this.clock.now() }; // counted on our clock
        this.refreshes += 1;
        this.failures = 0;
        this.onConfig(this.config);
        this._schedule(this.dueAt());
      } catch (err) {
        this.failures += 1;
        const wait = Math.min(RETRY_MAX_MS, RETRY_MIN_MS * 2 ** (this.failures - 1));
        console.warn(`ICE servers: refresh failed (${err && err.message}); retrying in ${wait / 1000} s`);
        this._schedule(this.clock.now() + wait);
      } finally {
        this._inflight = null;
      }
      return this.config;
    })();
    return this._inflight;
  }

  /** The current configuration, refreshed first when it is stale (the caller is about to open a relay). */
  fresh() {
    return this.stale() ? this.refresh() : Promise.resolve(this.config);
  }

  stop() {
    this._stopped = true;
    this._schedule(null);
  }
}

/** The selected candidate pair's candidate types ("host", "srflx", "prflx", "relay") from a getStats report. */
export function selectedPair(report) {
  let pairId = null;
  let nominated = null; // browsers without transport.selectedCandidatePairId
  report.forEach((s) => {
    if (s.type === "transport" && s.selectedCandidatePairId) pairId = s.selectedCandidatePairId;
    if (s.type === "candidate-pair" && s.nominated && s.state === "succeeded") nominated = s;
  });
  const pair = pairId ? report.get(pairId) : nominated;
  if (!pair) return { localCandidateType: null, remoteCandidateType: null };
  const local = report.get(pair.localCandidateId);
  const remote = report.get(pair.remoteCandidateId);
  return {
    localCandidateType: local ? local.candidateType : null,
    remoteCandidateType: remote ? remote.candidateType : null,
  };
}

/** The earliest expiry (unix seconds) of the TURN REST usernames ("<expiry>:<name>") a connection would use. */
export function turnExpiry(configuration) {
  const stamps = (configuration.iceServers || [])
    .map((s) => /^(\d+):/.exec(s.username || ""))
    .filter(Boolean)
    .map((m) => Number(m[1]));
  return stamps.length ? Math.min(...stamps) : null;
}
