// The call page's "I want to hear" choice: the language list the server delivers (listen-languages.js), the
// quality note next to it, and "Text only" (the listener key listen_speech, known to a server that publishes
// capabilities.listen; forced on for a language without a voice).

import { offerListenLanguages, pickListenOption, renderOfferNote } from "../listen-languages.js";
import { store } from "./store.js";

export class ListenChoice {
  /** `preferred`: the languages to pick, best first (the URL's, the remembered one, the browser's). */
  constructor({ select, textOnlyBox, noteEl, capabilities, preferred }) {
    this.select = select;
    this.textOnlyBox = textOnlyBox;
    this.noteEl = noteEl;
    this.offers = offerListenLanguages(select, capabilities);
    if (![...preferred, "en"].some((code) => code && pickListenOption(select, code)) && !select.value) {
      select.value = "en";
    }
    this.textOnlyWanted = store.get("text_only", "false") === "true";
    textOnlyBox.closest("label").hidden = !this.detailed;
    this.render();
  }

  /** Whether the server publishes capabilities.listen (and so takes listen_speech). */
  get detailed() {
    return Boolean(this.offers && this.offers.detailed);
  }

  /** The offer of the chosen language (null without capabilities). */
  offer() {
    return this.offers ? this.offers.byCode[this.select.value] || null : null;
  }

  /** Whether the chosen language has no voice here (text only, whatever the box says). */
  get forcedTextOnly() {
    return this.offer()?.speech === false;
  }

  get textOnly() {
    return this.textOnlyBox.checked;
  }

  render() {
    this.textOnlyBox.disabled = this.forcedTextOnly;
    this.textOnlyBox.checked = this.forcedTextOnly || this.textOnlyWanted;
    renderOfferNote(this.noteEl, this.offer());
  }

  /** The listener's config keys: listen_language, and listen_speech where the server knows it. */
  settings() {
    return { listen_language: this.select.value, ...(this.detailed ? { listen_speech: !this.textOnly } : {}) };
  }

  /** The select changed: remember it. */
  chosen() {
    store.set("hear", this.select.value);
    this.render();
  }

  /** The box changed: remember the wish (it stands for languages with a voice). */
  textOnlyToggled() {
    this.textOnlyWanted = this.textOnlyBox.checked;
    store.set("text_only", String(this.textOnlyWanted));
  }

  /** The server refused a change; `effective` is the session's config (the select is already back). */
  reverted(effective) {
    if (typeof effective.listen_speech === "boolean" && !this.forcedTextOnly) this.textOnlyWanted = !effective.listen_speech;
    store.set("hear", this.select.value);
    this.render();
  }
}
