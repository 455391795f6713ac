// Agent: a voice agent with OpenAI Realtime-style events (DESIGN.md section 4). Renders the conversation, the
// agent's state, tool calls (answering browser-side tools), and measures voice-to-voice latency at the peer:
// from the last moment the microphone was above the speech threshold to the first audible reply.

import { el } from "../dom.js";

const SPEECH_THRESHOLD = 0.02;


/** Tools this page can run itself, announced to the server in session.update; the server sends their calls as
 * response.function_call_arguments.done and waits for a function_call_output item. */
export const BROWSER_TOOL_SPECS = [
  {
    type: "function",
    name: "show_banner",
    description: "Show a short message in a banner at the top of the user's page.",
    parameters: {
      type: "object",
      properties: {
        text: { type: "string", description: "The message to show." },
        tone: { type: "string", enum: ["info", "success", "warning"], description: "Banner colour." },
      },
      required: ["text"],
    },
  },
  {
    type: "function",
    name: "get_local_time",
    description: "The current date, time and time zone of the user's device.",
    parameters: { type: "object", properties: {} },
  },
  {
    type: "function",
    name: "get_browser_info",
    description: "The user's browser language, screen size and whether it is online.",
    parameters: { type: "object", properties: {} },
  },
];

export const BROWSER_TOOLS = {
  show_banner: ({ text, tone = "info" }) => {
    const banner = document.getElementById("agent-banner");
    if (!banner) throw new Error("this page has no banner");
    banner.textContent = String(text).slice(0, 300);
    banner.dataset.tone = tone;
    banner.hidden = false;
    return { shown: true, text: banner.textContent, tone };
  },
  get_local_time: () => {
    const now = new Date();
    return {
      iso: now.toISOString(),
      local: now.toLocaleString(),
      time_zone: Intl.DateTimeFormat().resolvedOptions().timeZone,
    };
  },
  get_browser_info: () => ({
    language: navigator.language,
    user_agent: navigator.userAgent,
    screen: `${window.screen.width}x${window.screen.height}`,
    online: navigator.onLine,
  }),
};

/** The conversation shown on the page as a record: bubbles in order (those with text: a cancelled reply that
 * said nothing, or a turn still being transcribed, is no part of it), and the tool calls with their results. */
export function conversationRecord(conversation, toolCards) {
  const said = (b) => !b.classList.contains("pending") && (b.querySelector(".bubble-text")?.textContent || "").trim();
  const items = [...(conversation?.querySelectorAll(".bubble") || [])].filter(said).map((b) => ({
    role: b.classList.contains("user") ? "user" : "assistant",
    text: b.querySelector(".bubble-text")?.textContent || "",
    ...(b.dataset.status ? { status: b.dataset.status } : {}),
    ...(b.classList.contains("truncated") ? { interrupted: true } : {}),
  }));
  const parse = (text) => {
    try {
      return JSON.parse(text);
    } catch {
      return text;
    }
  };
  const tools = [...(toolCards?.querySelectorAll(".tool-card") || [])].reverse().map((c) => ({
    call_id: c.dataset.callId || null,
    name: c.querySelector(".tool-name")?.textContent || "",
    where: c.querySelector(".tool-where")?.textContent || "",
    status: c.dataset.status || "",
    arguments: parse(c.querySelector(".tool-args")?.textContent || "{}"),
    output: c.querySelector(".tool-result") ? parse(c.querySelector(".tool-result").textContent) : null,
  }));
  return { items, tool_calls: tools };
}

/** The record as plain text: one line per turn that said something, tool calls indented. */
export function conversationText(record) {
  const lines = record.items.filter((i) => (i.text || "").trim())
    .map((i) => `${i.role === "user" ? "You" : "Agent"}: ${i.text.trim()}`);
  for (const t of record.tool_calls) {
    lines.push(`  [tool ${t.name}] ${JSON.stringify(t.arguments)} -> ${JSON.stringify(t.output)}`);
  }
  return `${lines.join("\n")}\n`;
}

export function mount({ client, meters, $, setMuted, download, copyText, announce }) {
  const conversation = $("conversation");
  const stateEl = $("agent-state");
  const toolCards = $("tool-cards");
  const v2vEl = $("v2v-latency");
  const textForm = $("agent-text-form");
  const textInput = $("agent-text");
  const cancelBtn = $("agent-cancel");

  const responses = new Map(); // response_id -> bubble
  let pendingUser = null; // bubble created at speech start, filled by the transcription
  let v2v = [];
  let awaitingReply = null; // {endOfSpeech} after speech_stopped, until the reply is audible
  let lastMicVoice = null;

  // ------------------------------------------------------------ state badge
  const setState = (state) => {
    if (!stateEl) return;
    stateEl.textContent = state;
    stateEl.dataset.state = state;
  };

  // ------------------------------------------------------------ bubbles
  const bubble = (role, text = "") => {
    const b = el("div", `bubble ${role}`);
    b.append(el("div", "bubble-role", role === "user" ? "You" : "Agent"), el("div", "bubble-text", text));
    conversation.append(b);
    while (conversation.childElementCount > 200) conversation.firstElementChild.remove();
    conversation.scrollTop = conversation.scrollHeight;
    return b;
  };

  const assistantBubble = (responseId) => {
    const key = responseId || "_latest";
    let b = responses.get(key);
    if (!b) {
      b = bubble("assistant");
      b.classList.add("streaming");
      if (responseId) b.dataset.responseId = responseId;
      responses.set(key, b);
    }
    return b;
  };

  client.on("input_audio_buffer.speech_started", () => {
    setState("listening");
    if (!pendingUser) {
      pendingUser = bubble("user", "…");
      pendingUser.classList.add("pending");
    }
  });
  client.on("input_audio_buffer.speech_stopped", () => {
    setState("thinking");
    awaitingReply = { endOfSpeech: lastMicVoice ?? performance.now() };
  });
  client.on("conversation.item.input_audio_transcription.completed", (ev) => {
    const b = pendingUser || bubble("user");
    pendingUser = null;
    b.classList.remove("pending");
    if (ev.item_id) b.dataset.itemId = ev.item_id;
    b.querySelector(".bubble-text").textContent = ev.transcript || "";
    if (!(ev.transcript || "").trim()) b.remove();
  });
  client.on("response.created", (ev) => {
    const id = ev.response?.id || ev.response_id;
    assistantBubble(id);
    setState("thinking");
  });
  client.on("response.output_audio_transcript.delta", (ev) => {
    const b = assistantBubble(ev.response_id);
    b.querySelector(".bubble-text").append(document.createTextNode(ev.delta || ""));
    conversation.scrollTop = conversation.scrollHeight;
    if (stateEl?.dataset.state !== "tool") setState("speaking");
  });
  client.on("response.function_call_arguments.done", (ev) => {
    setState("tool");
    addToolCard(ev);
  });
  client.on("session.created", () => {
    client.send({ type: "session.update", session: { tools: BROWSER_TOOL_SPECS } });
  });
  client.on("conversation.item.created", (ev) => {
    const item = ev.item || {};
    if (item.type !== "function_call_output" || !toolCards) return;
    const card = toolCards.querySelector(`.tool-card[data-call-id="${CSS.escape(String(item.call_id))}"]`);
    if (!card || card.querySelector(".tool-result")) return;
    setCardStatus(card, item.ok === false ? "failed" : "done");
    let output = item.output;
    try {
      output = JSON.stringify(JSON.parse(output), null, 2);
    } catch {
      output = String(output ?? "");
    }
    card.append(el("pre", "tool-result", output));
  });
  client.on("response.done", (ev) => {
    const r = ev.response || {};
    const b = responses.get(r.id) || responses.get("_latest");
    if (b) {
      b.classList.remove("streaming");
      b.dataset.status = r.status || "completed";
      // a reply that said nothing (cancelled before its first word, or only tool calls) leaves no bubble;
      // a failed one keeps its note beside the error
      if (!b.querySelector(".bubble-text").textContent.trim() && r.status !== "failed") b.remove();
      else {
        if (r.status && r.status !== "completed") b.append(el("div", "bubble-note", r.status));
        announce?.(b.querySelector(".bubble-text").textContent); // the finished reply, once
      }
    }
    responses.delete(r.id);
    responses.delete("_latest");
    for (const card of toolCards?.querySelectorAll(`.tool-card[data-status="running"][data-response-id="${CSS.escape(String(r.id))}"]`) || []) {
      setCardStatus(card, r.status === "completed" ? "done" : r.status || "done");
    }
    setState(client.connected ? "listening" : "idle");
  });
  client.on("conversation.item.truncated", (ev) => {
    const b = conversation.querySelector(`.bubble[data-item-id="${CSS.escape(String(ev.item_id))}"]`)
      || [...conversation.querySelectorAll(".bubble.assistant")].pop();
    if (b) {
      b.classList.add("truncated");
      const at = typeof ev.audio_end_ms === "number" ? ` at ${(ev.audio_end_ms / 1000).toFixed(1)} s` : "";
      b.append(el("div", "bubble-note", `interrupted${at}`));
    }
  });
  client.on("error", () => {
    if (stateEl?.dataset.state === "thinking") setState(client.connected ? "listening" : "idle");
  });

  // ------------------------------------------------------------ tool cards
  const setCardStatus = (card, status) => {
    card.dataset.status = status;
    card.querySelector(".tool-status").textContent = status;
  };

  function addToolCard(ev) {
    if (!toolCards) return;
    const card = el("div", "tool-card");
    card.dataset.callId = ev.call_id || "";
    if (ev.response_id) card.dataset.responseId = ev.response_id;
    const head = el("div", "tool-head");
    const local = Object.prototype.hasOwnProperty.call(BROWSER_TOOLS, ev.name);
    head.append(el("span", "tool-name", ev.name || "tool"), el("span", "tool-where", local ? "browser" : "server"),
      el("span", "tool-status", "running"));
    let args = ev.arguments;
    try {
      args = JSON.stringify(typeof args === "string" ? JSON.parse(args) : args, null, 2);
    } catch {
      args = String(args ?? "");
    }
    card.append(head, el("pre", "tool-args", args));
    toolCards.prepend(card);
    while (toolCards.childElementCount > 50) toolCards.lastElementChild.remove();
    card.dataset.status = "running";
    if (local) runBrowserTool(ev, card);
  }

  async function runBrowserTool(ev, card) {
    let output;
    try {
      const args = typeof ev.arguments === "string" && ev.arguments ? JSON.parse(ev.arguments) : ev.arguments || {};
      output = await BROWSER_TOOLS[ev.name](args);
      setCardStatus(card, "done");
    } catch (err) {
      output = { error: err.message || String(err) };
      setCardStatus(card, "failed");
    }
    card.append(el("pre", "tool-result", JSON.stringify(output, null, 2)));
    // The server is waiting for this output and continues the same response with it.
    client.send({
      type: "conversation.item.create",
      item: { type: "function_call_output", call_id: ev.call_id, output: JSON.stringify(output) },
    });
  }

  // ------------------------------------------------------------ text input / cancel
  textForm?.addEventListener("submit", (e) => {
    e.preventDefault();
    const text = textInput.value.trim();
    if (!text || !client.connected) return;
    client.send({
      type: "conversation.item.create",
      item: { type: "message", role: "user", content: [{ type: "input_text", text }] },
    });
    client.send({ type: "response.create" });
    bubble("user", text);
    textInput.value = "";
    awaitingReply = { endOfSpeech: performance.now() };
  });
  cancelBtn?.addEventListener("click", () => client.send({ type: "response.cancel" }));

  // ------------------------------------------------------------ voice-to-voice latency
  meters.input.onSample((level, now) => {
    if (level >= SPEECH_THRESHOLD) lastMicVoice = now;
  });
  meters.output.onSample((level, now) => {
    if (!awaitingReply || level < SPEECH_THRESHOLD) return;
    const ms = now - awaitingReply.endOfSpeech;
    awaitingReply = null;
    if (ms < 0 || ms > 60000) return;
    v2v.push(ms);
    if (v2v.length > 20) v2v = v2v.slice(-20);
    const avg = v2v.reduce((a, b) => a + b, 0) / v2v.length;
    if (v2vEl) {
      v2vEl.textContent = `${Math.round(ms)} ms`;
      v2vEl.title = `average of ${v2v.length}: ${Math.round(avg)} ms`;
      v2vEl.dataset.ms = ms.toFixed(0);
      v2vEl.dataset.avgMs = avg.toFixed(0);
    }
    if (stateEl?.dataset.state === "thinking") setState("speaking");
  });

  // ------------------------------------------------------------ keep, clear, export
  const record = () => conversationRecord(conversation, toolCards);
  const stamp = () => new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
  $("agent-download-json")?.addEventListener("click", () => download?.(`conversation-${stamp()}.json`,
    `${JSON.stringify(record(), null, 2)}\n`, "application/json"));
  $("agent-download-text")?.addEventListener("click", () => download?.(`conversation-${stamp()}.txt`,
    conversationText(record())));
  $("agent-copy")?.addEventListener("click", (e) => copyText?.(conversationText(record()), e.currentTarget));
  $("agent-clear")?.addEventListener("click", () => {
    conversation?.replaceChildren();
    toolCards?.replaceChildren();
  });

  // ------------------------------------------------------------ push to talk (hold Space)
  const ptt = $("push-to-talk");
  let talking = false;
  const typing = (target) => target && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName)
    && target.type !== "checkbox");
  ptt?.addEventListener("change", () => {
    document.body.dataset.pushToTalk = String(ptt.checked);
    if (client.connected) setMuted?.(ptt.checked);
  });
  document.addEventListener("keydown", (e) => {
    if (!ptt?.checked || e.code !== "Space" || e.repeat || typing(e.target) || !client.connected) return;
    e.preventDefault();
    talking = true;
    document.body.dataset.talking = "true";
    setMuted?.(false);
  });
  document.addEventListener("keyup", (e) => {
    if (!ptt?.checked || e.code !== "Space" || !talking) return;
    e.preventDefault();
    talking = false;
    document.body.dataset.talking = "false";
    setMuted?.(true); // the server ends the turn at once (input_audio.muted)
  });

  client.addEventListener("statechange", (ev) => {
    const { state } = ev.detail;
    if (state === "connecting") {
      // the conversation stays until the user clears it; a new session starts a new response map
      responses.clear();
      pendingUser = null;
      awaitingReply = null;
      v2v = [];
      if (v2vEl) v2vEl.textContent = "—";
      setState("idle");
    } else if (state === "connected") {
      setState("listening");
      if (ptt?.checked) setMuted?.(true);
    } else if (state === "failed" || (state === "disconnected" && !client.pc)) {
      setState("idle");
    }
  });

  return {
    // the session ended: nothing stays "thinking", "streaming" or pending
    reset() {
      setState("idle");
      pendingUser?.remove();
      pendingUser = null;
      awaitingReply = null;
      for (const b of conversation?.querySelectorAll(".bubble.streaming") || []) b.classList.remove("streaming");
      for (const c of toolCards?.querySelectorAll('.tool-card[data-status="running"]') || []) setCardStatus(c, "ended");
      talking = false;
    },
    record,
  };
}
