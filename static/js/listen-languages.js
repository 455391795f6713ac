// What a listener can get in each language, from the page's client_config.capabilities, and the "I want to hear"
// selects built from it (/call and /interpret).
//
// capabilities.listen (when the server publishes it): {code: {text, speech, engine, voice, quality, reason}} per
// page language. Without it (an older server) the page falls back to capabilities.st.targets: those languages
// are offered (their speech is not known: no "(text only)" mark), every other one is disabled with a reason.
// Without either, the select stays as the template wrote it.
//
// The language "in effect" is the one the session's config holds (session.created / session.updated); a change
// the server refuses (error code unsupported_language, the config stays as it was) puts the selects back to it.

const DISPLAY = typeof Intl !== "undefined" && Intl.DisplayNames ? new Intl.DisplayNames(["en"], { type: "language" }) : null;

/** The English name of a language code (the template's label when it has one). */
export function languageName(code, known = {}) {
  if (known[code]) return known[code];
  try {
    return (DISPLAY && DISPLAY.of(code)) || code;
  } catch {
    return code;
  }
}

function offerFrom(code, entry) {
  const e = entry && typeof entry === "object" ? entry : {};
  return {
    code,
    text: e.text === true,
    speech: e.speech === true ? true : e.speech === false ? false : null,
    engine: typeof e.engine === "string" ? e.engine : null,
    voice: typeof e.voice === "string" ? e.voice : null,
    quality: typeof e.quality === "string" && e.quality ? e.quality : null,
    reason: typeof e.reason === "string" && e.reason ? e.reason : null,
  };
}

/**
 * The listen offers, in display order: the template's codes first (`codes`), then any other code the server
 * names. Returns {offers: [{code, text, speech, engine, voice, quality, reason}], detailed} or null when the
 * capabilities say nothing about listening. `detailed` is true when they come from capabilities.listen (the
 * server then also knows the listener key listen_speech).
 */
export function listenOffers(capabilities, codes) {
  const caps = capabilities || {};
  if (caps.listen && typeof caps.listen === "object" && !Array.isArray(caps.listen)) {
    const order = [...codes.filter((c) => c in caps.listen), ...Object.keys(caps.listen).filter((c) => !codes.includes(c))];
    return { offers: order.map((code) => offerFrom(code, caps.listen[code])), detailed: true };
  }
  const targets = caps.st && Array.isArray(caps.st.targets) ? caps.st.targets : null;
  if (!targets || !targets.length) return null;
  const into = targets.map((c) => languageName(c)).join(", ");
  const order = [...codes, ...targets.filter((c) => !codes.includes(c))];
  return {
    offers: order.map((code) => (targets.includes(code)
      ? offerFrom(code, { text: true })
      : offerFrom(code, { text: false, reason: `this server interprets into ${into} only` }))),
    detailed: false,
  };
}

/** The visible label of one offer: "Spanish", "Spanish (text only)" or "Spanish — unavailable: <reason>". */
export function offerLabel(offer, name) {
  if (!offer.text) return `${name} — unavailable: ${offer.reason || "not offered by this server"}`;
  return offer.speech === false ? `${name} (text only)` : name;
}

/**
 * Rebuild `select` from `capabilities`: one <option> per offer (unavailable ones disabled, with their reason in
 * the text), the current choice kept when still available, otherwise the first available one. Returns the offers
 * by code ({code: offer}) and whether they are detailed, or null (the select left as it was).
 */
export function offerListenLanguages(select, capabilities) {
  if (!select) return null;
  const names = Object.fromEntries([...select.options].map((o) => [o.value, o.textContent.trim()]));
  const listed = listenOffers(capabilities, [...select.options].map((o) => o.value).filter((v) => v !== "auto"));
  if (!listed) return null;
  const previous = select.value;
  select.replaceChildren();
  for (const offer of listed.offers) {
    const option = document.createElement("option");
    option.value = offer.code;
    option.textContent = offerLabel(offer, languageName(offer.code, names));
    option.disabled = !offer.text;
    option.dataset.text = String(offer.text);
    option.dataset.speech = String(offer.speech);
    if (offer.quality) option.dataset.quality = offer.quality;
    select.append(option);
  }
  const usable = (code) => listed.offers.some((o) => o.code === code && o.text);
  const first = listed.offers.find((o) => o.text);
  select.value = usable(previous) ? previous : first ? first.code : "";
  return { byCode: Object.fromEntries(listed.offers.map((o) => [o.code, o])), detailed: listed.detailed };
}

/** Select `value` in `select` when it is one of its enabled options; returns whether it did. */
export function pickListenOption(select, value) {
  const option = select && [...select.options].find((o) => o.value === value);
  if (!option || option.disabled) return false;
  select.value = value;
  return true;
}

/** The note next to the choice: its quality label (with engine and voice in the title), or "text only". */
export function renderOfferNote(noteEl, offer) {
  if (!noteEl) return;
  const parts = [];
  if (offer && offer.quality) parts.push(`quality: ${offer.quality}`);
  if (offer && offer.text && offer.speech === false) parts.push("text only");
  noteEl.textContent = parts.join(" · ");
  noteEl.hidden = parts.length === 0;
  const detail = offer ? [offer.engine && `engine ${offer.engine}`, offer.voice && `voice ${offer.voice}`].filter(Boolean) : [];
  noteEl.title = detail.length ? detail.join(", ") : "";
  if (offer && offer.quality) noteEl.dataset.quality = offer.quality;
  else delete noteEl.dataset.quality;
}

/**
 * Keep `pairs` ([[select, configKey], ...]) honest about the session: remember the values the session's config
 * holds (session.created / session.updated) and, on an error with code unsupported_language (the server refused
 * the change and kept its config), put every select back to that value and call `onRevert(config)`.
 * Returns {effective(key)}: the value in effect (null before a session).
 */
export function trackEffectiveConfig(client, pairs, onRevert = () => {}) {
  let config = null;
  const remember = (ev) => {
    const c = ev && ev.session && ev.session.config;
    if (c && typeof c === "object") config = { ...(config || {}), ...c };
  };
  client.on("session.created", remember);
  client.on("session.updated", remember);
  client.on("error", (ev) => {
    if (!config || (ev.error && ev.error.code) !== "unsupported_language") return;
    for (const [select, key] of pairs) {
      const value = config[key];
      if (select && [...select.options].some((o) => o.value === value)) select.value = value;
    }
    onRevert(config);
  });
  client.addEventListener("statechange", (ev) => {
    if (ev.detail.state === "connecting") config = null;
  });
  return { effective: (key) => (config && key in config ? config[key] : null) };
}
