// A key-value rendezvous over TCP (what torch's TCPStore is to c10d): the launcher hosts a
// StoreServer, ranks set and wait for keys through StoreClients to find each other.
//
// Protocol (one request, then its response, on each connection; integers little-endian):
//   request:  u8 command ('S' set, 'G' get, 'W' wait, 'A' add), u32 key bytes, u32 value
//             bytes, key, value (wait: i64 timeout in ms; add: i64 delta)
//   response: u8 status (0 ok, 1 no such key, 2 timed out), u32 bytes, value (add: i64)
// The server runs one thread that polls every connection; a wait is parked there until its
// key is set or its timeout passes (the client never polls). Values are binary-safe.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "comm/tcp/socket.h"

namespace strata::comm::tcp {

class StoreServer {
 public:
  explicit StoreServer(const std::string& bind_host = "0.0.0.0", int port = 0);  // 0: any free port
  ~StoreServer();  // stops its thread, closes every connection
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;
  int port() const { return port_; }
  // Local access for the process hosting it (the launcher), thread-safe:
  void set(const std::string& key, const std::string& value);
  std::optional<std::string> get(const std::string& key) const;  // never waits
  void erase_prefix(const std::string& prefix);

 private:
  struct Impl;
  void serve();
  std::unique_ptr<Impl> impl_;
  mutable std::mutex mu_;
  std::map<std::string, std::string> kv_;
  Fd listener_;
  Fd wake_;  // eventfd: stop, or a local set that may release parked waits
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// One connection to a store. Thread-safe: requests of several threads are serialised (a
// wait_get holds the connection until it returns; use one client per waiting thread when
// that matters).
class StoreClient {
 public:
  // Retries connecting until the timeout, then Error naming the address.
  StoreClient(const std::string& address /* "host:port" */, double connect_timeout_s);
  void set(const std::string& key, const std::string& value);
  std::optional<std::string> try_get(const std::string& key);     // no wait
  std::string wait_get(const std::string& key, double timeout_s);  // TimeoutError naming the key
  int64_t add(const std::string& key, int64_t delta);              // atomic counter, the new value
  std::string local_ip() const;  // this end's address of the connection
  const std::string& address() const { return address_; }

 private:
  // Sends one request and reads its response; returns the status, value in `out`.
  int request(char cmd, const std::string& key, const std::string& value, std::string& out,
              double wait_s);
  std::string address_;
  std::mutex mu_;
  Fd fd_;
};

// STRATA_STORE ("host:port", set by strata's launcher); "" when unset.
std::string store_address();

}  // namespace strata::comm::tcp
