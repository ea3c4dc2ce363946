// Raw-socket HTTP/1.1 for the hostile-client tests: send exact bytes (bad escapes, conflicting
// framing, pipelined requests, a half-close), and parse every response that comes back, so
// what is asserted is what went over the wire, not what a client library made of it.
import net from "node:net";

// Parses consecutive HTTP responses out of `buf` (a latin1 string). 1xx interim responses are
// returned too (status < 200). Stops at the first incomplete one.
export function parseResponses(buf) {
  const out = [];
  let pos = 0;
  for (;;) {
    const headEnd = buf.indexOf("\r\n\r\n", pos);
    if (headEnd < 0) break;
    const lines = buf.slice(pos, headEnd).split("\r\n");
    const m = lines[0].match(/^HTTP\/1\.[01] (\d{3})/);
    if (!m) throw new Error(`not a status line: ${JSON.stringify(lines[0])}`);
    const headers = {};
    for (const l of lines.slice(1)) {
      const i = l.indexOf(":");
      headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
    }
    const status = Number(m[1]);
    let p = headEnd + 4;
    let body = "";
    if (status < 200 || status === 204) {
      // no body
    } else if (headers["transfer-encoding"] === "chunked") {
      let complete = false;
      for (;;) {
        const le = buf.indexOf("\r\n", p);
        if (le < 0) break;
        const size = parseInt(buf.slice(p, le), 16);
        if (size === 0) {
          if (buf.length < le + 4) break;
          p = le + 4;
          complete = true;
          break;
        }
        if (buf.length < le + 2 + size + 2) break;
        body += buf.slice(le + 2, le + 2 + size);
        p = le + 2 + size + 2;
      }
      if (!complete) break;
    } else if (headers["content-length"] !== undefined) {
      const n = Number(headers["content-length"]);
      if (buf.length < p + n) break;
      body = buf.slice(p, p + n);
      p += n;
    } else {
      body = buf.slice(p);  // close-delimited
      p = buf.length;
    }
    out.push({ status, headers, body });
    pos = p;
  }
  return out;
}

// Connects to 127.0.0.1:port, writes `bytes` (string or Buffer; an array is written piece by
// piece), optionally half-closes, and resolves with { responses, raw, closed } once `want` final
// (>= 200) responses arrived, the server closed, or `timeoutMs` passed.
export function rawExchange(port, bytes, { halfClose = false, want = 1, timeoutMs = 20000 } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, "127.0.0.1");
    let raw = "";
    let done = false;
    const finish = (closed) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      let responses = [];
      try { responses = parseResponses(raw); } catch (e) { responses = [{ status: -1, error: String(e) }]; }
      resolve({ responses, final: responses.filter((r) => r.status >= 200), raw, closed });
    };
    const timer = setTimeout(() => finish(false), timeoutMs);
    sock.on("connect", () => {
      for (const piece of Array.isArray(bytes) ? bytes : [bytes]) sock.write(piece);
      if (halfClose) sock.end();
    });
    sock.on("data", (d) => {
      raw += d.toString("latin1");
      try {
        if (parseResponses(raw).filter((r) => r.status >= 200).length >= want) finish(false);
      } catch { /* incomplete */ }
    });
    sock.on("error", () => {});
    sock.on("close", () => finish(true));
  });
}

export function request(method, path, { host = "127.0.0.1", headers = {}, body = "" } = {}) {
  let s = `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n`;
  for (const [k, v] of Object.entries(headers)) s += `${k}: ${v}\r\n`;
  if (body || method === "POST") s += `Content-Length: ${Buffer.byteLength(body, "latin1")}\r\n`;
  return s + "\r\n" + body;
}

export function jsonPost(path, payload, headers = {}) {
  return request("POST", path, { headers: { "Content-Type": "application/json", ...headers },
                                 body: JSON.stringify(payload) });
}
