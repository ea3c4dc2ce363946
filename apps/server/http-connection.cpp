// HttpListener: the acceptor with its connection registry (limits, eviction) and Session, one
// per socket, serialized on its own strand: read -> dispatch -> write the answer -> next request.
// While a request is answered the session watches the socket so a reset client is noticed, and
// a client that only half-closed (sent its request, then FIN) still gets its answer.
#include "http-connection.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <cstdio>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace hearth::server {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// Header values come from the server, but a CR or LF in one would split the response.
std::string header_safe(std::string v) {
  for (char& c : v)
    if (c == '\r' || c == '\n') c = ' ';
  return v;
}

std::string serialize_head(int version, const HttpResponse& r, const std::string& framing) {
  std::string out = version >= 11 ? "HTTP/1.1 " : "HTTP/1.0 ";
  out += std::to_string(r.status);
  out += ' ';
  out += http_reason(r.status);
  out += "\r\n";
  if (!r.content_type.empty()) out += "Content-Type: " + header_safe(r.content_type) + "\r\n";
  for (const auto& [k, v] : r.headers) out += header_safe(k) + ": " + header_safe(v) + "\r\n";
  out += framing;
  out += "\r\n";
  return out;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
      .count();
}

}  // namespace

class Session;

struct HttpListener::Impl : std::enable_shared_from_this<HttpListener::Impl> {
  ConnectionLimits limits;
  HttpHandler handler;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  asio::steady_timer accept_retry{ioc};
  asio::steady_timer stop_timer{ioc};
  int port = -1;
  std::atomic<bool> stopped{false};

  mutable std::mutex mu;  // guards the registry
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions;
  std::unordered_map<std::string, size_t> per_ip;

  Impl(ConnectionLimits l, HttpHandler h) : limits(std::move(l)), handler(std::move(h)) {}
  void accept();
  bool admit(const std::shared_ptr<Session>& s);
  void stop_when_quiet(Clock::time_point deadline);
  void forget(Session* s);
};

// One connection. Every member runs on the socket's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class Phase { kWaiting, kReading, kBusy, kClosing, kClosed };

  Session(std::shared_ptr<HttpListener::Impl> owner, tcp::socket socket)
      : owner_(std::move(owner)),
        socket_(std::move(socket)),
        deadline_(socket_.get_executor()),
        ticker_(socket_.get_executor()),
        reader_(owner_->limits.request) {
    boost::system::error_code ec;
    const auto ep = socket_.remote_endpoint(ec);
    ip_ = ec ? "?" : ep.address().to_string();
    socket_.set_option(tcp::no_delay(true), ec);
  }
  ~Session() { owner_->forget(this); }

  const std::string& ip() const { return ip_; }
  Phase phase() const { return phase_.load(); }
  int64_t phase_since() const { return phase_since_.load(); }
  auto executor() { return socket_.get_executor(); }

  void start() {
    set_phase(Phase::kWaiting);
    arm_deadline(owner_->limits.head_timeout);
    read();
  }

  // Closes at once (deadline, eviction, stop). Safe to call twice.
  void close() {
    if (phase_ == Phase::kClosed) return;
    const bool was_busy = phase_ == Phase::kBusy;
    set_phase(Phase::kClosed);
    boost::system::error_code ec;
    socket_.close(ec);
    deadline_.cancel();
    ticker_.cancel();
    if (was_busy) mark_gone();
  }

  // Closes a connection that is not in the middle of being answered (eviction under load).
  void evict() {
    if (phase_ == Phase::kWaiting || phase_ == Phase::kReading) close();
  }

  // At stop: a connection being answered keeps going until what its handler has already
  // finished is written (finish_exchange then closes it, as owner_->stopped is set), so a
  // drained stream's error event and [DONE] reach the client; any other closes now.
  void close_unless_answering() {
    if (phase_ == Phase::kBusy || phase_ == Phase::kClosing) return;  // closing: lingers
    close();
  }

  // --- the exchange's operations (see HttpExchange) ---
  void send(HttpResponse r);
  void begin_stream(HttpResponse head, StreamOptions opt);
  void write_stream(std::string data);
  void end_stream();
  void on_gone(std::function<void()> fn) {
    if (gone_) return fn();
    gone_fns_.push_back(std::move(fn));
  }
  bool gone() const { return gone_.load(); }
  // The exchange was dropped: answer what the handler left unanswered.
  void abandon(uint64_t exchange_id);
  uint64_t exchange_id() const { return exchange_id_; }

 private:
  void set_phase(Phase p) {
    phase_ = p;
    phase_since_ = now_ns();
  }
  void arm_deadline(std::chrono::milliseconds d);
  void read();
  void read_more();
  void on_read(const boost::system::error_code& ec, size_t n);
  void process_input();
  void dispatch(HttpRequest req);
  void fail_request(int status, const std::string& message);
  void queue(std::string bytes);
  void do_write();
  void ack_now();
  void finish_exchange();
  void watch();
  void tick();
  void mark_gone();
  void linger_close();

  std::shared_ptr<HttpListener::Impl> owner_;
  tcp::socket socket_;
  asio::steady_timer deadline_, ticker_;
  RequestReader reader_;
  std::string ip_, in_;
  std::atomic<Phase> phase_{Phase::kWaiting};
  std::atomic<int64_t> phase_since_{0};
  uint64_t deadline_gen_ = 0;

  // The request being answered.
  uint64_t exchange_id_ = 0;
  int version_ = 11;
  bool keep_alive_ = true, head_only_ = false, answered_ = false, response_done_ = false;
  bool streaming_ = false, chunked_ = false, peer_eof_ = false, watching_ = false;
  bool continue_sent_ = false;
  std::atomic<bool> gone_{false};
  std::vector<std::function<void()>> gone_fns_;
  StreamOptions stream_opt_;
  Clock::time_point last_write_ = Clock::now();

  std::deque<std::string> out_;
  size_t out_bytes_ = 0;
  bool writing_ = false;
  friend class Exchange;
};

// The handler's handle on one exchange: forwards to the session's strand.
class Exchange : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Session> s, uint64_t id) : s_(std::move(s)), id_(id) {}
  ~Exchange() override {
    auto s = s_;
    const uint64_t id = id_;
    asio::post(s->executor(), [s, id] { s->abandon(id); });
  }
  void send(HttpResponse r) override {
    run([r = std::move(r)](Session& s) mutable { s.send(std::move(r)); });
  }
  void begin_stream(HttpResponse head, StreamOptions opt) override {
    run([h = std::move(head), o = std::move(opt)](Session& s) mutable {
      s.begin_stream(std::move(h), std::move(o));
    });
  }
  void write(std::string data) override {
    run([d = std::move(data)](Session& s) mutable { s.write_stream(std::move(d)); });
  }
  void end() override {
    run([](Session& s) { s.end_stream(); });
  }
  void post(std::function<void()> fn) override { asio::post(s_->executor(), std::move(fn)); }
  bool gone() const override { return s_->gone(); }
  void on_gone(std::function<void()> fn) override {
    run([f = std::move(fn)](Session& s) mutable { s.on_gone(std::move(f)); });
  }

 private:
  template <class F>
  void run(F f) {
    auto s = s_;
    const uint64_t id = id_;
    asio::post(s->executor(), [s, id, f = std::move(f)]() mutable {
      if (s->exchange_id() == id) f(*s);
    });
  }
  std::shared_ptr<Session> s_;
  uint64_t id_;
};

void Session::arm_deadline(std::chrono::milliseconds d) {
  const uint64_t gen = ++deadline_gen_;
  deadline_.expires_after(d);
  deadline_.async_wait([self = shared_from_this(), gen](const boost::system::error_code& ec) {
    if (ec || gen != self->deadline_gen_) return;
    const Phase p = self->phase_;
    // Waiting for or inside a request head/body past its deadline; busy sessions have none.
    if (p == Phase::kWaiting || p == Phase::kReading || p == Phase::kClosing) self->close();
  });
}

void Session::read() {
  if (phase_ == Phase::kClosed) return;
  if (!in_.empty()) return process_input();  // pipelined bytes read with the last request
  read_more();
}

// Appends what arrives to in_ (which may hold a partial head the parser must see again).
void Session::read_more() {
  const size_t old = in_.size();
  in_.resize(old + 16384);
  socket_.async_read_some(
      asio::buffer(in_.data() + old, 16384),
      [self = shared_from_this(), old](const boost::system::error_code& ec, size_t n) {
        self->in_.resize(old + (ec ? 0 : n));
        self->on_read(ec, n);
      });
}

void Session::on_read(const boost::system::error_code& ec, size_t) {
  if (phase_ == Phase::kClosed) return;
  if (ec) {
    reader_.feed_eof();
    if (reader_.state() == RequestReader::State::kError && ec == asio::error::eof)
      return fail_request(reader_.error_status(), reader_.error());
    return close();
  }
  process_input();
}

void Session::process_input() {
  const bool had_head = reader_.head_done();
  const size_t used = reader_.feed(in_);
  in_.erase(0, used);
  if (phase_ == Phase::kWaiting && reader_.started()) {
    set_phase(Phase::kReading);
    arm_deadline(owner_->limits.head_timeout);
  }
  if (!had_head && reader_.head_done() && reader_.state() == RequestReader::State::kNeedMore) {
    arm_deadline(owner_->limits.body_timeout);
    ack_now();
    if (reader_.expects_continue()) queue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  switch (reader_.state()) {
    case RequestReader::State::kError:
      return fail_request(reader_.error_status(), reader_.error());
    case RequestReader::State::kDone: {
      HttpRequest req = reader_.take();
      reader_.reset();
      return dispatch(std::move(req));
    }
    case RequestReader::State::kNeedMore:
      return read_more();
  }
}

// A client that writes its head and body separately with Nagle's algorithm on (cpp-httplib's
// default, among others) holds the body until the head is acknowledged, and Linux delays that
// ACK by up to 40 ms: measured, most of a prefix-cache hit's time to first token. Once a head is
// complete and its body is still to come, the ACK goes out at once.
void Session::ack_now() {
#ifdef TCP_QUICKACK
  const int on = 1;
  (void)::setsockopt(socket_.native_handle(), IPPROTO_TCP, TCP_QUICKACK, &on, sizeof on);
#endif
}

void Session::dispatch(HttpRequest req) {
  set_phase(Phase::kBusy);
  ++deadline_gen_;
  deadline_.cancel();
  ++exchange_id_;
  version_ = req.version;
  keep_alive_ = req.keep_alive;
  head_only_ = req.method == "HEAD";
  answered_ = response_done_ = streaming_ = chunked_ = continue_sent_ = false;
  gone_fns_.clear();
  stream_opt_ = StreamOptions{};
  req.remote_addr = ip_;
  watch();
  auto ex = std::make_shared<Exchange>(shared_from_this(), exchange_id_);
  try {
    owner_->handler(std::move(req), ex);
  } catch (...) {
    HttpResponse r;
    r.status = 500;
    r.content_type = "application/json";
    r.body = R"({"error":{"message":"the server failed to answer this request",)"
             R"("type":"server_error","param":null,"code":"internal_error"}})";
    ex->send(std::move(r));
  }
}

// A request the reader refused: answer it and close (its framing can no longer be trusted).
void Session::fail_request(int status, const std::string& message) {
  set_phase(Phase::kBusy);
  ++exchange_id_;
  version_ = 11;
  keep_alive_ = false;
  head_only_ = answered_ = response_done_ = streaming_ = false;
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  std::string safe;
  for (char c : message) safe += (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? c : '?';
  const char* code = status == 413 ? "request_too_large" : "invalid_request";
  r.body = std::string(R"({"error":{"message":")") + safe +
           R"(","type":"invalid_request_error","param":null,"code":")" + code + "\"}}";
  send(std::move(r));
}

void Session::send(HttpResponse r) {
  if (answered_ || phase_ == Phase::kClosed) return;
  answered_ = true;
  if (r.close || !owner_ || owner_->stopped) keep_alive_ = false;
  std::string framing = "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  if (!keep_alive_)
    framing += "Connection: close\r\n";
  else if (version_ < 11)
    framing += "Connection: keep-alive\r\n";
  std::string bytes = serialize_head(version_, r, framing);
  if (!head_only_) bytes += r.body;
  response_done_ = true;
  queue(std::move(bytes));
}

void Session::begin_stream(HttpResponse head, StreamOptions opt) {
  if (answered_ || phase_ == Phase::kClosed) return;
  answered_ = streaming_ = true;
  chunked_ = version_ >= 11;
  if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the body ends when the connection does
  stream_opt_ = std::move(opt);
  std::string framing = chunked_ ? "Transfer-Encoding: chunked\r\n" : "Connection: close\r\n";
  queue(serialize_head(version_, head, framing));
  if (!stream_opt_.idle_text.empty()) tick();
}

void Session::write_stream(std::string data) {
  if (!streaming_ || response_done_ || data.empty() || head_only_) return;
  if (chunked_) {
    char size[24];
    std::snprintf(size, sizeof size, "%zx\r\n", data.size());
    data = size + data + "\r\n";
  }
  queue(std::move(data));
}

void Session::end_stream() {
  if (!streaming_ || response_done_) return;
  response_done_ = true;
  if (chunked_ && !head_only_)
    queue("0\r\n\r\n");
  else if (!writing_ && out_.empty())
    finish_exchange();
}

void Session::abandon(uint64_t id) {
  if (id != exchange_id_ || phase_ != Phase::kBusy) return;
  if (!answered_) {
    HttpResponse r;
    r.status = 500;
    r.content_type = "application/json";
    r.body = R"({"error":{"message":"the request was not answered","type":"server_error",)"
             R"("param":null,"code":"internal_error"}})";
    send(std::move(r));
  } else if (streaming_ && !response_done_) {
    end_stream();
  }
}

void Session::queue(std::string bytes) {
  if (phase_ == Phase::kClosed || gone_) return;
  out_bytes_ += bytes.size();
  if (out_bytes_ > owner_->limits.max_unsent_bytes) return close();
  out_.push_back(std::move(bytes));
  if (!writing_) do_write();
}

void Session::do_write() {
  writing_ = true;
  asio::async_write(socket_, asio::buffer(out_.front()),
                    [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
                      self->writing_ = false;
                      if (ec) return self->close();
                      self->out_bytes_ -= self->out_.front().size();
                      self->out_.pop_front();
                      self->last_write_ = Clock::now();
                      if (!self->out_.empty()) return self->do_write();
                      if (self->response_done_ && self->phase_ == Phase::kBusy)
                        self->finish_exchange();
                    });
}

void Session::finish_exchange() {
  ++exchange_id_;  // late calls from the old exchange are ignored from here on
  ticker_.cancel();
  if (watching_) {
    boost::system::error_code ec;
    socket_.cancel(ec);  // the readiness watch; nothing else is outstanding now
    watching_ = false;
  }
  if (!keep_alive_ || owner_->stopped) return linger_close();
  set_phase(Phase::kWaiting);
  arm_deadline(owner_->limits.idle_timeout);
  read();
}

// Waits for the socket to turn readable while the request is answered: a reset means the client
// is gone; end of stream means it half-closed (or closed) and is probed; data is a pipelined
// request, left in the kernel for after this answer.
void Session::watch() {
  watching_ = true;
  const uint64_t id = exchange_id_;
  socket_.async_wait(
      tcp::socket::wait_read, [self = shared_from_this(), id](const boost::system::error_code& ec) {
        if (ec || id != self->exchange_id_ || self->phase_ != Phase::kBusy) return;
        self->watching_ = false;
        char b;
        const ssize_t n = ::recv(self->socket_.native_handle(), &b, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0) return;  // a pipelined request: its turn comes later
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return self->watch();
        if (n < 0) return self->close();
        self->peer_eof_ = true;
        // A client that fully closed answers the next bytes with a reset, which
        // tick() sees; a 1xx interim response is the one thing HTTP/1.1 lets us
        // send before the answer, and clients must skip it (RFC 9110 15.2).
        if (!self->answered_ && self->version_ >= 11 && !self->continue_sent_) {
          self->continue_sent_ = true;
          self->queue("HTTP/1.1 100 Continue\r\n\r\n");
        }
        if (self->stream_opt_.idle_text.empty() || !self->streaming_) self->tick();
      });
}

// Every 100 ms while busy: a reset after the peer's FIN means it is gone; a stream silent for
// its idle interval gets its idle text.
void Session::tick() {
  const uint64_t id = exchange_id_;
  ticker_.expires_after(100ms);
  ticker_.async_wait([self = shared_from_this(), id](const boost::system::error_code& ec) {
    if (ec || id != self->exchange_id_ || self->phase_ != Phase::kBusy) return;
    if (self->peer_eof_) {
      pollfd p{self->socket_.native_handle(), POLLIN, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLERR | POLLHUP))) return self->close();
    }
    if (self->streaming_ && !self->response_done_ && !self->stream_opt_.idle_text.empty() &&
        self->out_.empty() && Clock::now() - self->last_write_ >= self->stream_opt_.idle_interval)
      self->write_stream(self->stream_opt_.idle_text);
    self->tick();
  });
}

void Session::mark_gone() {
  if (gone_.exchange(true)) return;
  auto fns = std::move(gone_fns_);
  for (auto& f : fns) f();
}

// After the last answer: stop sending, drain what the client still sends for a moment, then
// close. Closing with unread input would reset the connection and could destroy the answer in
// the client's receive buffer before it read it.
void Session::linger_close() {
  set_phase(Phase::kClosing);
  boost::system::error_code ec;
  socket_.shutdown(tcp::socket::shutdown_send, ec);
  arm_deadline(2000ms);
  auto buf = std::make_shared<std::array<char, 4096>>();
  auto drain = std::make_shared<std::function<void()>>();
  *drain = [self = shared_from_this(), buf, drain] {
    self->socket_.async_read_some(asio::buffer(*buf),
                                  [self, buf, drain](const boost::system::error_code& e, size_t) {
                                    if (e || self->phase_ == Phase::kClosed) {
                                      self->close();
                                      *drain = nullptr;  // break the cycle
                                      return;
                                    }
                                    (*drain)();
                                  });
  };
  (*drain)();
}

// --- listener ---

bool HttpListener::Impl::admit(const std::shared_ptr<Session>& s) {
  std::shared_ptr<Session> victim;
  // Every session locked below stays owned here until the lock is released: one whose other
  // owners let go meanwhile is destroyed when `seen` is, and its destructor takes `mu`
  // (forget()). Destroyed under the lock, it deadlocked the listener, and with it every later
  // accept and close (seen under ASan with 400 sockets churning at the per-address limit).
  std::vector<std::shared_ptr<Session>> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    const bool ip_full = per_ip[s->ip()] >= limits.max_connections_per_ip;
    const bool all_full = sessions.size() >= limits.max_connections;
    if (ip_full || all_full) {
      int64_t oldest = INT64_MAX;
      seen.reserve(sessions.size());
      for (auto& [p, w] : sessions) {
        seen.push_back(w.lock());
        const std::shared_ptr<Session>& c = seen.back();
        if (!c) continue;
        const auto ph = c->phase();
        if (ph != Session::Phase::kWaiting && ph != Session::Phase::kReading) continue;
        if (ip_full && !all_full && c->ip() != s->ip()) continue;
        if (c->phase_since() < oldest) {
          oldest = c->phase_since();
          victim = c;
        }
      }
      if (!victim) return false;
    }
    sessions.emplace(s.get(), s);
    per_ip[s->ip()]++;
  }
  if (victim) asio::post(victim->executor(), [victim] { victim->evict(); });
  return true;
}

void HttpListener::Impl::forget(Session* s) {
  std::lock_guard<std::mutex> lock(mu);
  if (sessions.erase(s) == 0) return;
  auto it = per_ip.find(s->ip());
  if (it != per_ip.end() && --it->second == 0) per_ip.erase(it);
}

void HttpListener::Impl::accept() {
  acceptor.async_accept(
      asio::make_strand(ioc),
      [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
        if (self->stopped) return;
        if (ec) {
          if (ec == asio::error::operation_aborted) return;
          // Out of file descriptors (or another transient failure): retry shortly, do not spin.
          self->accept_retry.expires_after(50ms);
          self->accept_retry.async_wait([self](const boost::system::error_code& e) {
            if (!e) self->accept();
          });
          return;
        }
        auto s = std::make_shared<Session>(self, std::move(socket));
        if (self->admit(s)) asio::post(s->executor(), [s] { s->start(); });
        self->accept();
      });
}

HttpListener::HttpListener(ConnectionLimits limits, HttpHandler handler)
    : impl_(std::make_shared<Impl>(std::move(limits), std::move(handler))) {}

HttpListener::~HttpListener() {
  stop();
  // Run the closes stop() queued, so sessions drop their references to the loop (they hold it
  // alive, as its queued handlers hold them).
  impl_->ioc.restart();
  impl_->ioc.run_for(200ms);
}

Status HttpListener::bind(const std::string& host, int port) {
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(host, ec);
  if (ec) return Status::error("cannot bind " + host + ": not an IP address");
  const tcp::endpoint ep(addr, uint16_t(port));
  auto& a = impl_->acceptor;
  a.open(ep.protocol(), ec);
  if (!ec) a.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) a.bind(ep, ec);
  if (!ec) a.listen(impl_->limits.listen_backlog, ec);
  if (ec)
    return Status::error("cannot bind " + host + ":" + std::to_string(port) + " (" + ec.message() +
                         ")");
  impl_->port = a.local_endpoint().port();
  return Status::ok();
}

int HttpListener::port() const {
  return impl_->port;
}

void HttpListener::run() {
  if (impl_->stopped) return;
  impl_->accept();
  std::vector<std::thread> threads;
  for (int i = 1; i < impl_->limits.io_threads; ++i)
    threads.emplace_back([this] { impl_->ioc.run(); });
  impl_->ioc.run();
  for (auto& t : threads) t.join();
}

void HttpListener::stop() {
  if (impl_->stopped.exchange(true)) return;
  auto impl = impl_;
  asio::post(impl->ioc, [impl] {
    boost::system::error_code ec;
    impl->acceptor.close(ec);
    impl->accept_retry.cancel();
    std::vector<std::shared_ptr<Session>> all;
    {
      std::lock_guard<std::mutex> lock(impl->mu);
      for (auto& [p, w] : impl->sessions)
        if (auto s = w.lock()) all.push_back(s);
    }
    for (auto& s : all) asio::post(s->executor(), [s] { s->close_unless_answering(); });
    impl->stop_when_quiet(Clock::now() + impl->limits.stop_flush);
  });
}

// Ends run() once no connection is left, or at the deadline: those still open then are
// closed (a handler that never finished its answer gets no more time).
void HttpListener::Impl::stop_when_quiet(Clock::time_point deadline) {
  std::vector<std::shared_ptr<Session>> left;
  {
    std::lock_guard<std::mutex> lock(mu);  // (released before a closed one is let go: admit())
    for (auto& [p, w] : sessions)
      if (auto s = w.lock()) left.push_back(std::move(s));
  }
  std::erase_if(left, [](const auto& s) { return s->phase() == Session::Phase::kClosed; });
  if (left.empty() || Clock::now() >= deadline) {
    for (auto& s : left) asio::post(s->executor(), [s] { s->close(); });
    asio::post(ioc, [self = shared_from_this()] { self->ioc.stop(); });
    return;
  }
  stop_timer.expires_after(10ms);
  stop_timer.async_wait([self = shared_from_this(), deadline](const boost::system::error_code&) {
    self->stop_when_quiet(deadline);
  });
}

size_t HttpListener::open_connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->sessions.size();
}

}  // namespace hearth::server
