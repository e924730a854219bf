package cloudsim

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Fault is an injected misbehaviour of the API, matched against the route
// pattern of each request ("POST /compute/v2.1/servers").
type Fault struct {
	// Match is a substring of the route pattern; empty matches every route.
	Match string `json:"match,omitempty"`
	// Rate is the share of matching requests hit, 0 to 1. Default 1.
	Rate float64 `json:"rate,omitempty"`
	// Count, when set, limits the fault to that many hits.
	Count int `json:"count,omitempty"`
	// Status answers with this code (500, 503, 429...) without doing anything.
	Status int `json:"status,omitempty"`
	// RetryAfter, in seconds, is sent with Status.
	RetryAfter int `json:"retry_after,omitempty"`
	// Latency delays the request.
	Latency Duration `json:"latency,omitempty"`
	// Drop processes the request, then closes the connection unanswered:
	// the change happened and the client cannot know.
	Drop bool `json:"drop,omitempty"`
	// Seed, when set, draws the fault's Rate from its own generator seeded
	// with it: a client sending its requests one at a time meets the same
	// hits on every run, so a test can count on them. Unset, the draws are
	// random.
	Seed uint64 `json:"seed,omitempty"`
}

// Duration is a time.Duration written as "100ms" in JSON.
type Duration struct{ time.Duration }

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	d.Duration = v
	return nil
}

type faultSet struct {
	mu     sync.Mutex
	faults []*activeFault
}

type activeFault struct {
	Fault
	hits int
	// rand is the fault's own generator when it has a Seed.
	rand *rand.Rand
}

// draw reports whether a matching request is hit at the fault's Rate.
func (f *activeFault) draw() bool {
	if f.Rate >= 1 {
		return true
	}
	if f.rand != nil {
		return f.rand.Float64() < f.Rate
	}
	return rand.Float64() < f.Rate //nolint:gosec // fault injection needs no crypto
}

// SetFaults replaces the injected faults; no argument clears them.
func (s *Sim) SetFaults(faults ...Fault) {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	s.faults.faults = nil
	for _, f := range faults {
		if f.Rate == 0 {
			f.Rate = 1
		}
		a := &activeFault{Fault: f}
		if f.Seed != 0 {
			a.rand = rand.New(rand.NewPCG(f.Seed, f.Seed)) //nolint:gosec // fault injection needs no crypto
		}
		s.faults.faults = append(s.faults.faults, a)
	}
}

// Faults returns the faults in force, with Count lowered by the hits so far.
func (s *Sim) Faults() []Fault {
	s.faults.mu.Lock()
	defer s.faults.mu.Unlock()
	out := []Fault{}
	for _, f := range s.faults.faults {
		v := f.Fault
		if v.Count > 0 {
			v.Count -= f.hits
		}
		out = append(out, v)
	}
	return out
}

// match returns the fault that hits this request, if any.
func (fs *faultSet) match(pattern string) *Fault {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	for _, f := range fs.faults {
		if !strings.Contains(pattern, f.Match) || (f.Count > 0 && f.hits >= f.Count) {
			continue
		}
		if !f.draw() {
			continue
		}
		f.hits++
		v := f.Fault
		return &v
	}
	return nil
}

type counters struct {
	mu     sync.Mutex
	m      map[string]int64
	busy   time.Duration
	writes []Write
}

// Write is a request that could change the cloud (any method but GET and
// HEAD) and reached its handler, with who sent it.
type Write struct {
	At    time.Time `json:"at"`
	Route string    `json:"route"`
	// Agent is the request's User-Agent: an OPKE daemon names itself in it.
	Agent string `json:"agent"`
}

// maxWrites bounds the write log: the oldest entries go first.
const maxWrites = 100_000

func (c *counters) wrote(w Write) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.writes) == maxWrites {
		c.writes = slices.Delete(c.writes, 0, maxWrites/10)
	}
	c.writes = append(c.writes, w)
}

// Writes returns the log of writes since the start or the last
// ResetCounters (the newest 100,000), oldest first: who changed the cloud
// and when, for a test that two writers never interleave.
func (s *Sim) Writes() []Write {
	s.count.mu.Lock()
	defer s.count.mu.Unlock()
	return append([]Write{}, s.count.writes...)
}

// took adds the time an API handler ran since started.
func (c *counters) took(started time.Time) {
	d := time.Since(started)
	c.mu.Lock()
	c.busy += d
	c.mu.Unlock()
}

// Busy returns the time the API handlers ran since the start or the last
// ResetCounters, summed over the requests: the simulator's own share of a
// caller's wall time (its fault latencies included).
func (s *Sim) Busy() time.Duration {
	s.count.mu.Lock()
	defer s.count.mu.Unlock()
	return s.count.busy
}

func newCounters() *counters { return &counters{m: map[string]int64{}} }

func (c *counters) add(pattern string) {
	c.mu.Lock()
	c.m[pattern]++
	c.mu.Unlock()
}

// Counters returns the number of requests per route pattern since the
// start or the last ResetCounters.
func (s *Sim) Counters() map[string]int64 {
	s.count.mu.Lock()
	defer s.count.mu.Unlock()
	return maps.Clone(s.count.m)
}

// ResetCounters sets every request counter to zero.
func (s *Sim) ResetCounters() {
	s.count.mu.Lock()
	s.count.m, s.count.busy, s.count.writes = map[string]int64{}, 0, nil
	s.count.mu.Unlock()
}
