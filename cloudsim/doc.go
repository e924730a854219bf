// Package cloudsim is OPKE's OpenStack simulator: a stateful HTTP server
// that speaks the real REST APIs of Keystone v3, Nova (microversions up to
// Zed's 2.93), Glance v2 (images), Neutron, Octavia, Swift and Cinder
// (Block Storage v3 up to Zed's 3.70, cinder.go), so that
// gophercloud and the upstream openstack CLI work against it unchanged. It
// is the cloud of `make run` and of every end-to-end test; the conformance
// suite runs the same tests against a real control plane to keep it honest.
//
// It has a top-level folder because it is a boundary of its own: OPKE's
// OpenStack code never knows whether it talks to it or to a cloud.
//
// One call starts it on 127.0.0.1 (it refuses any other address, and the
// addresses it hands out exist only inside it):
//
//	sim, err := cloudsim.Start(ctx, cloudsim.Options{StateDir: dir})
//	if err != nil { ... }
//	defer sim.Close()
//	// dir/clouds.yaml has the clouds "sim" (a member of project demo) and
//	// "sim-admin"; dir/sim.json says where the APIs and the admin endpoint are.
//
// It starts seeded like a fresh cloud: the external network "public"
// (203.0.113.0/24), flavors m1.small, m1.medium and m1.large, images flatcar
// and fedora-coreos, projects demo and admin with finite quotas, and 8
// hypervisors for anti-affinity. Servers go BUILD -> ACTIVE and load
// balancers PENDING_* -> ACTIVE after Options.BootDelay, computed from the
// clock on each request rather than by timers, so tests move time with
// Options.Now.
//
// For tests and benchmarks: [Sim.Counters] counts requests per route
// pattern ("POST /compute/v2.1/servers"), [Sim.SetFaults] injects errors
// with Retry-After, latency, or a connection dropped after the request took
// effect (the case that makes naive clients create duplicates), and
// [Sim.Snapshot] writes the state to dir/state.json, which a restarted
// simulator resumes. The admin endpoint offers the same over HTTP.
//
// Every ACTIVE server is a host (hosts.go): its user_data applied at first
// boot by Debian's Ignition (or an in-process fallback), its SSH host key
// printed on its console when a unit of its config prints it, an
// in-process SSH server for the unprivileged user core (passwordless sudo)
// with SFTP into the host's root folder as core, direct-tcpip forwarding
// on its own networks, and a small exec set (hostexec.go: systemctl,
// sha256sum, cat, install, mv, rm, touch, behind sudo or not) whose
// effects on units are recorded ([Sim.HostEvents]). The only way in from
// outside is the SOCKS5 edge ([Sim.Edge]), standing for the internet side
// of floating IPs; nothing is ever dialled at a simulated address
// (routes.go). HOSTS.md says where these hosts differ from real machines;
// the host contract suite holds them to those.
//
// With [Options.Hosts] set to [HostsReal] (root only) every server is a
// real machine instead (realhosts.go, package machine): a container with
// systemd booted from the project's host image, on networks, routers,
// security groups and load balancers made of network namespaces and
// nftables, reached through the edge as a cloud's hosts are through their
// floating IPs.
//
// Controllers behave like controllers (controllers.go): starting
// etcd-member.service runs a real etcd member with the pushed etcd.env and
// certificates, the members of a cluster forming one etcd cluster; starting
// kubelet.service runs the kube-apiserver static pod as a stand-in (package
// kubestub) with the pushed serving certificate, behind the load
// balancer's listener too. Pods and disruption budgets for drains are set
// with [Sim.SetKubeObjects]. Units that were active run again when the
// simulator restarts from its state dir, when a server is rebooted, and
// when one stopped (SHUTOFF: its host off, its disk kept) is started
// again; an administrator's reset-state changes Nova's record only, as in
// Nova.
//
// With [Options.Attach] the host layer serves another cloud's servers
// (attach.go): a real control plane whose Nova has no hypervisor
// (test/openstack) is read as an admin, user_data included, and every
// ACTIVE server there gets a simulated host here, reached through this
// simulator's edge; its console is [Sim.ConsoleOutput]. The conformance
// suite runs the engine's create, upgrade and backup flow that way.
package cloudsim
