package webhook

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSlowBodiesHoldNoSlot: 32 connections that send a review's body one
// byte every half second (any pod can reach /mutate) must not keep real
// reviews out. The reviews in flight are bounded (limitInFlight); a body
// is read before a slot is taken, under its own time and byte budget, so
// the slow ones hold a connection and a few bytes, not a slot. With the
// slot taken first, 2 slots were held for the 15 s read timeout and every
// real review got 429. Each announces the largest body a review may have,
// and sends a byte. Each slow connection must also be ended by the body's
// time budget. Bounded: 32 connections, at most 40 s.
func TestSlowBodiesHoldNoSlot(t *testing.T) {
	const slow, real = 32, 8
	h := newHandler()
	h.Metrics, h.Log = NewMetrics(), testLogger(t)
	ts := startServerOpts(t, h, h.Metrics, h.Log, func(s *Server) { s.MaxInFlight = 2 })
	addr := strings.TrimSuffix(strings.TrimPrefix(ts.URL, "https://"), "/mutate")
	tlsConf := ts.Client.Transport.(*http.Transport).TLSClientConfig

	stop := make(chan struct{})
	ended := make(chan time.Duration, slow)
	var wg, sent sync.WaitGroup
	for range slow {
		wg.Add(1)
		sent.Add(1)
		go func() {
			defer wg.Done()
			conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 10 * time.Second}, "tcp", addr, tlsConf)
			if err != nil {
				t.Error(err)
				sent.Done()
				ended <- -1
				return
			}
			defer conn.Close()
			began := time.Now()
			// The largest length a review may have: what a client
			// announces must not size what the server holds for it.
			fmt.Fprintf(conn, "POST /mutate HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", MaxRequestBytes)
			// The first byte of the body too: the server is then reading
			// it, as a slow client's request is, before any real review.
			_, _ = conn.Write([]byte(" "))
			sent.Done()
			// Trickle until the server gives up on the body (a write or
			// the read below fails), the test ends, or 40 s pass.
			go func() {
				tick := time.NewTicker(500 * time.Millisecond)
				defer tick.Stop()
				for i := 0; i < 80; i++ {
					select {
					case <-stop:
						return
					case <-tick.C:
						if _, err := conn.Write([]byte(" ")); err != nil {
							return
						}
					}
				}
			}()
			conn.SetReadDeadline(time.Now().Add(40 * time.Second))
			buf := make([]byte, 512)
			_, _ = conn.Read(buf) // an answer (408) or the close
			ended <- time.Since(began)
		}()
	}
	sent.Wait() // every slow connection is into its body, whatever the load
	codes := map[int]int{}
	for range real {
		resp, _ := post(t, ts, "application/json", podReview(t, nativePod))
		codes[resp.StatusCode]++
	}
	close(stop)
	if codes[http.StatusOK] != real {
		t.Errorf("real reviews answered %v while %d connections trickled their bodies, want all %d 200", codes, slow, real)
	}
	wg.Wait()
	close(ended)
	var longest time.Duration
	for d := range ended {
		if d < 0 {
			continue
		}
		longest = max(longest, d)
	}
	t.Logf("%d real reviews: %v; the slow connections ended after at most %s", real, codes, longest.Round(100*time.Millisecond))
	if longest >= 40*time.Second {
		t.Errorf("a slow connection was never ended by the server")
	}
}
