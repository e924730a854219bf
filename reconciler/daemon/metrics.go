package daemon

import (
	"sync"

	"opke.dev/opke/backup"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Metrics are the daemon's Prometheus metrics, on a registry of their own.
type Metrics struct {
	Registry *prometheus.Registry

	reconcile   *prometheus.HistogramVec
	changes     *prometheus.CounterVec
	drift       *prometheus.CounterVec
	apiCalls    *prometheus.CounterVec
	lastApplied *prometheus.GaugeVec
	errors      *prometheus.CounterVec
	leader      prometheus.Gauge
	members     prometheus.Gauge
	// Day 2: rollouts and backups.
	rolloutHosts *prometheus.GaugeVec
	gateFailures *prometheus.CounterVec
	backupTime   *prometheus.GaugeVec
	backupSize   *prometheus.GaugeVec
	backupDrill  *prometheus.GaugeVec
	// applied remembers each cluster's commit label, to drop the old one.
	mu      sync.Mutex
	applied map[string]string
}

// NewMetrics registers the daemon's metrics and Go's and the process's.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		reconcile: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "opke_reconcile_duration_seconds", Help: "Time to plan and apply one cluster, by kind (commit, resync, pull_request) and result.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 14)}, []string{"kind", "result"}),
		changes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opke_plan_changes_total", Help: "Changes in the plans made, by action."}, []string{"action"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opke_drift_detected_total", Help: "Changes made outside OPKE that a resync found, by cluster."}, []string{"cluster"}),
		apiCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opke_openstack_api_calls_total", Help: "Requests sent to OpenStack, by service."}, []string{"service"}),
		lastApplied: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "opke_last_applied_commit_timestamp_seconds", Help: "When a cluster's last commit was applied, with the commit as a label."}, []string{"cluster", "commit"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opke_errors_total", Help: "Errors, by stage (fetch, plan, apply, report, election; lease: a cluster lease that lapsed during an apply, which was resumed)."}, []string{"stage"}),
		leader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opke_leader", Help: "1 while this daemon leads (takes the commits in), 0 otherwise."}),
		members: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "opke_members", Help: "The daemons sharing the fleet, as this one sees them."}),
		rolloutHosts: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "opke_rollout_hosts", Help: "Hosts of a cluster, by whether they run the spec's Kubernetes version (state: done, pending)."}, []string{"cluster", "state"}),
		gateFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "opke_health_gate_failures_total", Help: "Health gates that did not pass (a rollout halted), by cluster."}, []string{"cluster"}),
		backupTime: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "opke_last_backup_timestamp_seconds", Help: "When a cluster's newest etcd snapshot was taken."}, []string{"cluster"}),
		backupSize: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "opke_last_backup_size_bytes", Help: "The size of a cluster's newest etcd snapshot."}, []string{"cluster"}),
		backupDrill: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "opke_last_backup_drill_passed", Help: "1 if the newest snapshot's restore drill passed, 0 if it failed, absent if none ran."}, []string{"cluster"}),
		applied: map[string]string{},
	}
	m.Registry.MustRegister(m.reconcile, m.changes, m.drift, m.apiCalls, m.lastApplied, m.errors, m.leader, m.members,
		m.rolloutHosts, m.gateFailures, m.backupTime, m.backupSize, m.backupDrill,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// APICall counts a request to OpenStack: cloud.Pool's OnRequest.
func (m *Metrics) APICall(service string) { m.apiCalls.WithLabelValues(service).Inc() }

func (m *Metrics) errorAt(stage string) { m.errors.WithLabelValues(stage).Inc() }

// appliedAt sets the cluster's last applied commit.
func (m *Metrics) appliedAt(cluster, commit string, unix float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.applied[cluster]; ok && old != commit {
		m.lastApplied.DeleteLabelValues(cluster, old)
	}
	m.applied[cluster] = commit
	m.lastApplied.WithLabelValues(cluster, commit).Set(unix)
}

// rollout sets how many of a cluster's hosts run its spec's version.
func (m *Metrics) rollout(cluster string, done, total int) {
	m.rolloutHosts.WithLabelValues(cluster, "done").Set(float64(done))
	m.rolloutHosts.WithLabelValues(cluster, "pending").Set(float64(total - done))
}

func (m *Metrics) gateFailed(cluster string) { m.gateFailures.WithLabelValues(cluster).Inc() }

// backup sets a cluster's newest snapshot.
func (m *Metrics) backup(cluster string, r *backup.Record) {
	m.backupTime.WithLabelValues(cluster).Set(float64(r.Taken.Unix()))
	m.backupSize.WithLabelValues(cluster).Set(float64(r.Size))
	if r.Drill != nil {
		v := 0.0
		if r.Drill.Passed {
			v = 1
		}
		m.backupDrill.WithLabelValues(cluster).Set(v)
	}
}
