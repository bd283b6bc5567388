'use strict';
// The console's only way to the service: the public routes, with the tenant's
// token from this tab's sessionStorage as `Authorization`. The token is never
// put in a URL or a cookie. A 401 anywhere signs the tab out.

const TOKEN_KEY = 'agentry.console.token';

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

const api = {
  /** Called with a message when the service refuses the token. */
  onUnauthorized: null,

  token() { return sessionStorage.getItem(TOKEN_KEY); },
  setToken(token) { sessionStorage.setItem(TOKEN_KEY, token); },
  forget() { sessionStorage.removeItem(TOKEN_KEY); },

  headers(extra) {
    const h = Object.assign({}, extra || {});
    const token = api.token();
    if (token) h.Authorization = 'Bearer ' + token;
    return h;
  },

  refused() {
    api.forget();
    if (api.onUnauthorized) api.onUnauthorized('The service refused the token: sign in again.');
  },

  /** `METHOD path` with an optional JSON body; the JSON answer, or an ApiError. */
  async request(method, path, body) {
    const init = { method, cache: 'no-store', credentials: 'omit', headers: api.headers() };
    if (body !== undefined) {
      init.headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(path, init);
    } catch (e) {
      throw new ApiError(0, 'the service cannot be reached (' + e.message + ')');
    }
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (response.status === 401) {
      api.refused();
      throw new ApiError(401, 'not signed in');
    }
    if (!response.ok) {
      const message = data && data.error && data.error.message ? data.error.message : response.statusText;
      throw new ApiError(response.status, message);
    }
    return data;
  },
  get(path) { return api.request('GET', path); },
  post(path, body) { return api.request('POST', path, body); },
};

/**
 * A run's event stream, read with fetch (EventSource cannot send the token).
 * Each event goes to `onEvent(seq, type, record)`; after a drop it reconnects
 * with `Last-Event-ID`, so every event arrives once. It ends after
 * `run_stopped` or on `close()`.
 */
class EventStream {
  constructor(runId, onEvent, onState) {
    this.path = '/runs/' + encodeURIComponent(runId) + '/events';
    this.onEvent = onEvent;
    this.onState = onState;
    this.last = 0;
    this.closed = false;
    this.ended = false;
    this.controller = null;
  }

  close() {
    this.closed = true;
    if (this.controller) this.controller.abort();
  }

  async run() {
    let delay = 250;
    while (!this.closed && !this.ended) {
      try {
        await this.once();
        delay = 250;
      } catch (e) {
        if (this.closed) return;
        if (e instanceof ApiError && (e.status === 401 || e.status === 404)) {
          this.onState('closed: ' + e.message);
          return;
        }
      }
      if (this.closed || this.ended) break;
      this.onState('reconnecting…');
      await new Promise((resolve) => setTimeout(resolve, delay));
      delay = Math.min(delay * 2, 5000);
    }
    if (this.ended) this.onState('the run stopped; its stream ended');
  }

  async once() {
    this.controller = new AbortController();
    const extra = { Accept: 'text/event-stream' };
    if (this.last > 0) extra['Last-Event-ID'] = String(this.last);
    const response = await fetch(this.path, {
      headers: api.headers(extra), cache: 'no-store', credentials: 'omit', signal: this.controller.signal,
    });
    if (response.status === 401) {
      api.refused();
      throw new ApiError(401, 'not signed in');
    }
    if (!response.ok) throw new ApiError(response.status, response.statusText);
    this.onState(this.last > 0 ? 'live (caught up after event ' + this.last + ')' : 'live');
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value.replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        this.block(block);
      }
    }
  }

  block(text) {
    let id = null, type = 'message';
    const data = [];
    for (const line of text.split('\n')) {
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? '' : line.slice(colon + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'id') id = value;
      else if (field === 'event') type = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) return;
    const seq = id === null ? this.last : Number(id);
    if (seq > 0 && seq <= this.last) return;
    let record;
    try { record = JSON.parse(data.join('\n')); } catch (e) { return; }
    if (seq > 0) this.last = seq;
    if (type === 'run_stopped') this.ended = true;
    this.onEvent(seq, type, record);
  }
}

/** An element `tag` with class `cls` and text `text` (never HTML). */
function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** "3 s", "4 min", "2 h", "5 d" since `ms` (a Unix time in milliseconds). */
function age(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 90) return s + ' s';
  if (s < 5400) return Math.round(s / 60) + ' min';
  if (s < 172800) return Math.round(s / 3600) + ' h';
  return Math.round(s / 86400) + ' d';
}

/** The outcome class of a tool result, as `agentry view` colours it. */
function outcomeClass(result) {
  if (!result || result.ok) return 'ok';
  const code = result.error && result.error.code;
  switch (code) {
    case 'EPERM': case 'ESANDBOX': return 'refused';
    case 'ECANCELED': return 'cancelled';
    case 'ENOTOOL': case 'EINVAL': case 'EPRECOND': return 'bad_call';
    case 'ETIMEDOUT': case 'EUNAVAIL': return 'transient';
    default: return result.error && result.error.retryable ? 'transient' : 'failed';
  }
}
