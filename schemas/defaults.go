package schemas

import "time"

// The defaults [Cluster.Default] fills in.
const (
	DefaultPodCIDR         = "10.2.0.0/16"
	DefaultServiceCIDR     = "10.3.0.0/16"
	DefaultCNI             = "flannel"
	DefaultNetworkPolicy   = NetworkPolicyKubeRouter
	DefaultMaxUnavailable  = 1
	DefaultDrainTimeout    = 10 * time.Minute
	DefaultOSReboots       = OSRebootsCoordinated
	DefaultBackupInterval  = 24 * time.Hour
	DefaultBackupRetain    = 7
	DefaultBackupContainer = "opke-backups"
	DefaultUnhealthyAfter  = 5 * time.Minute
	DefaultMaxUnhealthy    = 1
)

// Default fills every optional field that has a default. It is idempotent, so
// a defaulted spec marshals and parses back to itself.
func (c *Cluster) Default() {
	s := &c.Spec
	setDefault(&s.Network.PodCIDR, DefaultPodCIDR)
	setDefault(&s.Network.ServiceCIDR, DefaultServiceCIDR)
	setDefault(&s.Network.CNI, DefaultCNI)
	setDefault(&s.Network.NetworkPolicy, DefaultNetworkPolicy)
	setDefault(&s.Upgrade.MaxUnavailable, DefaultMaxUnavailable)
	setDefault(&s.Upgrade.DrainTimeout, Duration{DefaultDrainTimeout})
	setDefault(&s.Upgrade.OSReboots, DefaultOSReboots)
	if s.Backup != nil {
		setDefault(&s.Backup.Interval, Duration{DefaultBackupInterval})
		setDefault(&s.Backup.Retain, DefaultBackupRetain)
		setDefault(&s.Backup.Container, DefaultBackupContainer)
	}
	if s.Remediation != nil {
		setDefault(&s.Remediation.UnhealthyAfter, Duration{DefaultUnhealthyAfter})
		setDefault(&s.Remediation.MaxUnhealthy, DefaultMaxUnhealthy)
	}
	if s.PKI != nil {
		setDefault(&s.PKI.Generation, 1)
		setDefault(&s.PKI.Phase, RotationComplete)
	}
	if s.DriftCorrection == nil {
		on := true
		s.DriftCorrection = &on
	}
	setDefault(&s.DeletionPolicy, DeletionRetain)
}

// DriftCorrectionEnabled reports whether drift is corrected without a commit.
func (s *Spec) DriftCorrectionEnabled() bool {
	return s.DriftCorrection == nil || *s.DriftCorrection
}

func setDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}
