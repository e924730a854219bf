package cloudsim

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"opke.dev/opke/cloudsim/kubestub"
	"opke.dev/opke/internal/atomicfile"
)

// The admin endpoint, for tests and benchmarks (never part of a cloud):
//
//	GET    /counters    requests per route pattern: {"counts": {...}, "total": N}
//	DELETE /counters    reset the counters (and the write log)
//	GET    /writes      the write log: [{"at", "route", "agent"}], oldest first
//	GET    /faults      the injected faults
//	PUT    /faults      replace them: a JSON list of Fault
//	PUT    /boot-delay  {"boot_delay": "2s"}
//	POST   /snapshot    write state.json now
//	GET    /kube/{server}  the objects of the Kubernetes cluster the server is in
//	PUT    /kube/{server}  replace them: {"pods": [...], "budgets": [...], "unschedulable": {...}}
func (s *Sim) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counters", func(rw http.ResponseWriter, _ *http.Request) {
		counts := s.Counters()
		var total int64
		for _, n := range counts {
			total += n
		}
		writeJSON(rw, http.StatusOK, map[string]any{"counts": counts, "total": total})
	})
	mux.HandleFunc("DELETE /counters", func(rw http.ResponseWriter, _ *http.Request) {
		s.ResetCounters()
		rw.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /writes", func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, http.StatusOK, s.Writes())
	})
	mux.HandleFunc("GET /faults", func(rw http.ResponseWriter, _ *http.Request) {
		writeJSON(rw, http.StatusOK, s.Faults())
	})
	mux.HandleFunc("PUT /faults", func(rw http.ResponseWriter, r *http.Request) {
		var faults []Fault
		if err := json.NewDecoder(r.Body).Decode(&faults); err != nil {
			writeJSON(rw, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		s.SetFaults(faults...)
		writeJSON(rw, http.StatusOK, s.Faults())
	})
	mux.HandleFunc("PUT /boot-delay", func(rw http.ResponseWriter, r *http.Request) {
		var body struct {
			BootDelay Duration `json:"boot_delay"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeJSON(rw, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		s.SetBootDelay(body.BootDelay.Duration)
		rw.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /kube/{server}", func(rw http.ResponseWriter, r *http.Request) {
		o, err := s.KubeObjects(r.PathValue("server"))
		if err != nil {
			writeJSON(rw, http.StatusNotFound, map[string]any{"error": err.Error()})
			return
		}
		writeJSON(rw, http.StatusOK, o)
	})
	mux.HandleFunc("PUT /kube/{server}", func(rw http.ResponseWriter, r *http.Request) {
		var o kubestub.Objects
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			writeJSON(rw, http.StatusBadRequest, map[string]any{"error": err.Error()})
			return
		}
		if err := s.SetKubeObjects(r.PathValue("server"), o); err != nil {
			writeJSON(rw, http.StatusNotFound, map[string]any{"error": err.Error()})
			return
		}
		writeJSON(rw, http.StatusOK, o)
	})
	mux.HandleFunc("POST /snapshot", func(rw http.ResponseWriter, _ *http.Request) {
		if err := s.Snapshot(); err != nil {
			writeJSON(rw, http.StatusConflict, map[string]any{"error": err.Error()})
			return
		}
		rw.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// SetBootDelay changes how long new servers and load balancers stay pending.
func (s *Sim) SetBootDelay(d time.Duration) {
	s.mu.Lock()
	s.opts.BootDelay = d
	s.mu.Unlock()
}

// Info is the content of sim.json: where a running simulator answers.
type Info struct {
	API     string `json:"api"`
	AuthURL string `json:"auth_url"`
	Admin   string `json:"admin"`
	// Edge is the SOCKS5 address that reaches simulated floating IPs.
	Edge string `json:"edge"`
}

// Info says where the simulator answers.
func (s *Sim) Info() Info {
	return Info{API: s.URL(), AuthURL: s.AuthURL(), Admin: s.AdminURL(), Edge: s.Edge()}
}

// CloudsYAML returns a clouds.yaml with the clouds "sim" (the non-admin
// demo user) and "sim-admin".
func (s *Sim) CloudsYAML() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	demo, admin := s.w.Users[s.w.DemoUser], s.w.Users[s.w.AdminUser]
	// With real hosts the public endpoints are the machines' (PublicURL):
	// clients on this machine take the internal ones.
	iface := "public"
	if s.real != nil {
		iface = "internal"
	}
	cloud := func(name string, u *user, projectName string) string {
		return fmt.Sprintf(`  %s:
    auth:
      auth_url: %s
      username: %s
      password: %q
      project_name: %s
      user_domain_name: Default
      project_domain_name: Default
    region_name: %s
    interface: %s
    identity_api_version: 3
`, name, s.AuthURL(), u.Name, u.Password, projectName, RegionName, iface)
	}
	return []byte("# Written by opke sim: the simulated cloud's credentials.\nclouds:\n" +
		cloud("sim", demo, DemoProjectName) + cloud("sim-admin", admin, AdminProjectName))
}

func (s *Sim) writeClientFiles() error {
	dir := s.opts.StateDir
	if err := atomicfile.Write(filepath.Join(dir, "clouds.yaml"), s.CloudsYAML(), 0o600); err != nil {
		return err
	}
	info, err := json.MarshalIndent(s.Info(), "", "  ")
	if err != nil {
		return fmt.Errorf("sim.json: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(dir, "sim.json"), append(info, '\n'), 0o644); err != nil {
		return err
	}
	// 0711: others may pass through (Ignition writes core's home as uid
	// 500 under hosts/) but not list; the secret files are 0600 themselves.
	return os.Chmod(dir, 0o711)
}
