//! The response side of an exchange: the head forwarded, the body relayed from the upstream
//! to the client in the framing the plan says, small pieces gathered into one write; answers
//! of the proxy's own; the access-log line.

use super::*;

impl Conn<'_> {
    /// Forwards the response whose head is in `self.resp`, then its body; the upstream
    /// connection goes back to the pool when it can carry another request. `Ok(keep)`: the
    /// client connection stays open.
    pub(super) async fn respond(
        &mut self,
        shared: &ListenerShared,
        i: usize,
        up: Upstream,
        plan: &RequestPlan,
        ustats: &UpstreamStats,
        mut facts: Option<&mut Facts>,
    ) -> Result<bool, Failure> {
        let addr = shared.spec.upstreams[i].addr;
        let t = shared.spec.timeouts;
        // a stopping worker finishes this exchange and closes (and says so)
        let plan = RequestPlan {
            keep_alive: plan.keep_alive && !*self.stop.borrow(),
            ..*plan
        };
        let rp = match forward::response(
            &self.upb,
            &self.resp,
            &plan,
            self.served_by.as_deref(),
            &mut self.out,
        ) {
            Ok(p) => p,
            Err(_) => {
                ustats.error(ErrorKind::Protocol);
                return Err(Failure::upstream(502, "the upstream failed\n"));
            }
        };
        let status = self.resp.status;
        self.ctx.stats.response(status);
        if let Some(f) = facts.as_deref_mut() {
            f.status = status;
            f.upstream = Some(addr);
        }
        let mut body = self.relay(&up, &rp, ustats, facts.as_deref_mut(), t).await;
        if body.is_ok() {
            body = self
                .flush(Due::After(t.client_write))
                .await
                .map_err(Cut::client);
        }
        if let Err(cut) = body {
            if let Some(f) = facts {
                f.cut = true;
            }
            if cut == (Cut::Client { timeout: true }) {
                self.ctx.stats.client_error(ClientErrorKind::WriteTimeout);
            }
            self.out.clear();
            return Ok(false);
        }
        if rp.upstream_keep_alive && self.resp_len == self.upb.len() {
            self.ctx
                .checkin(i, addr, up, shared.spec.http.keepalive_pool);
        }
        Ok(rp.keep_alive)
    }

    /// Relays the response body from `self.upb[self.resp_len..]` and the upstream to the
    /// client, framed as `rp` says (`resp_len` moves to the end of what was used).
    async fn relay(
        &mut self,
        up: &Upstream,
        rp: &ResponsePlan,
        ustats: &UpstreamStats,
        mut facts: Option<&mut Facts>,
        t: crate::spec::Timeouts,
    ) -> Result<(), Cut> {
        let cd = Due::After(t.client_write);
        let ud = Due::After(t.upstream_read);
        let chunk = rp.client == Framing::Chunked;
        let mut left = match rp.upstream {
            Framing::None => return Ok(()),
            Framing::Length(n) => n,
            _ => 0,
        };
        let mut decoder = Chunked::default();
        loop {
            let start = self.resp_len;
            match rp.upstream {
                Framing::Length(_) => {
                    let take = (self.upb.len() - start).min(left as usize);
                    left -= take as u64;
                    self.resp_len += take;
                    self.emit(start, start + take, false, cd).await?;
                    count_out(facts.as_deref_mut(), take);
                    if left == 0 {
                        return Ok(());
                    }
                }
                Framing::Chunked => loop {
                    let mut pos = self.resp_len;
                    let step = decoder.next(&self.upb, &mut pos);
                    self.resp_len = pos;
                    match step {
                        Err(_) => {
                            ustats.error(ErrorKind::Protocol);
                            return Err(Cut::Upstream);
                        }
                        Ok(Decoded::Need) => break,
                        Ok(Decoded::End) => {
                            if chunk {
                                self.out.extend_from_slice(LAST_CHUNK);
                            }
                            return Ok(());
                        }
                        Ok(Decoded::Data(s, e)) => {
                            self.emit(s, e, chunk, cd).await?;
                            count_out(facts.as_deref_mut(), e - s);
                        }
                    }
                },
                _ => {
                    let end = self.upb.len();
                    self.resp_len = end;
                    if end > start {
                        self.emit(start, end, chunk, cd).await?;
                        count_out(facts.as_deref_mut(), end - start);
                    }
                }
            }
            // All of the buffer is used: what is gathered for the client goes before waiting
            // for more, or a body that streams (or stalls) would hold its last piece back.
            self.flush(cd).await.map_err(Cut::client)?;
            self.upb.clear();
            self.resp_len = 0;
            match read(&up.stream, &mut self.upb, &mut self.timer, ud).await {
                Ok(n) => add(&ustats.bytes_in, n as u64),
                Err(Wait::Closed) if rp.upstream == Framing::Close => {
                    if chunk {
                        self.out.extend_from_slice(LAST_CHUNK);
                    }
                    return Ok(());
                }
                Err(Wait::Timeout) => {
                    ustats.error(ErrorKind::ReadTimeout);
                    return Err(Cut::Upstream);
                }
                Err(_) => return Err(Cut::Upstream),
            }
        }
    }

    /// Sends `self.upb[s..e]` to the client (as one chunk when `chunk`): gathered in
    /// `self.out` when small, else written from where it lies after what is gathered.
    async fn emit(&mut self, s: usize, e: usize, chunk: bool, due: Due) -> Result<(), Cut> {
        if chunk {
            body::chunk_head(&mut self.out, e - s);
        }
        if self.out.len() + (e - s) <= COALESCE {
            self.out.extend_from_slice(&self.upb[s..e]);
        } else {
            self.flush(due).await.map_err(Cut::client)?;
            write(&self.client, &self.upb[s..e], &mut self.timer, due)
                .await
                .map_err(Cut::client)?;
            add(&self.ctx.stats.bytes_out, (e - s) as u64);
        }
        if chunk {
            self.out.extend_from_slice(CHUNK_END);
        }
        Ok(())
    }

    /// Writes what is gathered for the client.
    async fn flush(&mut self, due: Due) -> Result<(), Wait> {
        if self.out.is_empty() {
            return Ok(());
        }
        let r = write(&self.client, &self.out, &mut self.timer, due).await;
        if r.is_ok() {
            add(&self.ctx.stats.bytes_out, self.out.len() as u64);
        }
        self.out.clear();
        r
    }

    /// Sends an answer of the proxy's own; `false` when the client could not take it.
    pub(super) async fn local(
        &mut self,
        status: u16,
        text: &'static str,
        close: bool,
        facts: Option<&mut Facts>,
    ) -> bool {
        self.ctx.stats.response(status);
        if let Some(f) = facts {
            f.status = status;
            f.upstream = None;
            f.bytes_out += text.len() as u64;
        }
        forward::local(
            &mut self.out,
            status,
            text,
            close,
            self.served_by.as_deref(),
        );
        let due = Due::After(self.ctx.shared().spec.timeouts.client_write);
        self.flush(due).await.is_ok()
    }

    pub(super) fn log(&self, f: &Facts, took: Duration) {
        self.ctx.log(Record {
            upstream: f.upstream,
            status: (f.status != 0).then_some(f.status),
            outcome: if f.status == 0 {
                "no_response"
            } else if f.cut {
                "cut"
            } else {
                "ok"
            },
            request: Some((&f.method, &f.target)),
            bytes_in: f.bytes_in,
            bytes_out: f.bytes_out,
            duration: took,
            ..Record::new(Kind::Http, self.peer)
        });
    }
}

/// Why a response body was cut short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// The upstream failed, stalled or sent a malformed body.
    Upstream,
    /// The client left, or stopped reading (`timeout`: for `client_write`).
    Client { timeout: bool },
}

impl Cut {
    fn client(w: Wait) -> Self {
        Self::Client {
            timeout: w == Wait::Timeout,
        }
    }
}

fn count_out(facts: Option<&mut Facts>, n: usize) {
    if let Some(f) = facts {
        f.bytes_out += n as u64;
    }
}
