package world

import "opke.dev/opke/render/assets"

// The e2e test images upstream's [Conformance] specs of v1.36 run
// besides agnhost and pause (test/utils/image/manifest.go names them;
// which spec runs which is in docs/conformance.md), each built as its
// test/images/<name> folder builds it, or as a stand-in world/LIMITS.md
// names with why.

// E2EImage is an e2e test image of Kubernetes' own registry by its name
// and tag (busybox:1.37.0-1).
func E2EImage(nameTag string) string {
	return assets.KubernetesRegistry + "/e2e-test-images/" + nameTag
}

// busyboxTarball is BusyBox 1.37.0's release tarball as Debian's
// archive keeps it (busybox_1.37.0.orig.tar.bz2, upstream's own
// busybox-1.37.0.tar.bz2 renamed; Debian's trixie package builds from
// it): busybox.net is not reachable from here.
var busyboxTarball = &Tarball{
	URL:    "http://deb.debian.org/debian/pool/main/b/busybox/busybox_1.37.0.orig.tar.bz2",
	SHA256: "3311dff32e746499f4df0d5df04d7eb396382d7e108bb9250e7b519b837043a4",
}

// busyboxScript builds BusyBox as Docker's official busybox image
// builds it (docker-library/busybox): make defconfig, statically linked;
// tc left out, as there (its CBQ code needs kernel headers older than
// Linux 6.8's).
const busyboxScript = `make defconfig >/dev/null
sed -i -e 's/^# CONFIG_STATIC is not set$/CONFIG_STATIC=y/' -e 's/^CONFIG_TC=y$/# CONFIG_TC is not set/' .config
make -j"$(nproc)" busybox >build.log 2>&1 || { tail -30 build.log; exit 1; }
cp busybox "$OUT/busybox"`

// busyboxPasswd and busyboxGroup are the users and groups of Docker's
// busybox image (buildroot's skeleton, which it copies).
const busyboxPasswd = `root:x:0:0:root:/root:/bin/sh
daemon:x:1:1:daemon:/usr/sbin:/bin/false
bin:x:2:2:bin:/bin:/bin/false
sys:x:3:3:sys:/dev:/bin/false
sync:x:4:100:sync:/bin:/bin/sync
mail:x:8:8:mail:/var/spool/mail:/bin/false
www-data:x:33:33:www-data:/var/www:/bin/false
operator:x:37:37:Operator:/var:/bin/false
nobody:x:65534:65534:nobody:/home:/bin/false
`

const busyboxGroup = `root:x:0:
daemon:x:1:
bin:x:2:
sys:x:3:
adm:x:4:
tty:x:5:
disk:x:6:
wheel:x:10:root
mail:x:8:
www-data:x:33:
operator:x:37:
users:x:100:
nogroup:x:65534:
`

// Busybox is registry.k8s.io/e2e-test-images/busybox:1.37.0-1, the
// image most of the suite's pods that are not agnhost run: upstream's
// test/images/busybox is FROM busybox:1.37.0, Docker's official image,
// which is BusyBox 1.37.0 built from its release with defconfig, every
// applet a hard link to /bin/busybox, buildroot's /etc/passwd and
// group, CMD sh. Its ash keeps environment variables whose names are
// not the shell's (data-1, p-data-1: the ConfigMap and Secret specs
// read them back with env); Debian's dash and Debian's own busybox
// build drop them.
func Busybox() Artifact {
	return Artifact{Key: "busybox-1.37.0", Module: "busybox.net/busybox", Version: "1.37.0", Lang: Make,
		Tarball: busyboxTarball, Script: busyboxScript,
		Binaries: []Binary{{Name: "busybox"}},
		Images: []ImageSpec{{Ref: E2EImage("busybox:1.37.0-1"),
			Files: []ImageFile{
				{Binary: "busybox", Path: "/bin/busybox", Applets: true},
				{Path: "/usr/bin/env", Link: "/bin/busybox"},
				{Path: "/etc/passwd", Content: busyboxPasswd},
				{Path: "/etc/group", Content: busyboxGroup},
				{Path: "/root/"}, {Path: "/home/"}, {Path: "/var/www/"},
			},
			Cmd: []string{"sh"}}},
	}
}

// nginxBase is Debian's nginx, standing for upstream's nginx:1.15-alpine
// that test/images/nginx builds on (nginx is C, not on the module proxy).
var nginxBase = &Base{Suite: "bookworm", Packages: []string{"nginx-light", "ca-certificates"}}

// nginxConf serves /usr/share/nginx/html on port 80 as the official
// nginx image does, logging to the container's output, its temporary
// files in /tmp (the base keeps no /var/log or /var/lib/nginx).
const nginxConf = `user www-data;
worker_processes 1;
pid /run/nginx.pid;
error_log /dev/stderr;
events { worker_connections 768; }
http {
  include /etc/nginx/mime.types;
  default_type application/octet-stream;
  access_log /dev/stdout;
  client_body_temp_path /tmp/nginx-client-body;
  proxy_temp_path /tmp/nginx-proxy;
  fastcgi_temp_path /tmp/nginx-fastcgi;
  uwsgi_temp_path /tmp/nginx-uwsgi;
  scgi_temp_path /tmp/nginx-scgi;
  server {
    listen 80 default_server;
    root /usr/share/nginx/html;
    index index.html;
  }
}
`

// Nginx is registry.k8s.io/e2e-test-images/nginx:1.15-4 (test/images/
// nginx-new, FROM nginx:1.15-alpine), a stand-in of Debian's nginx: the
// specs that run it (garbage collection, endpoints, replication
// controllers) want a container that serves port 80 and stays ready.
func Nginx() Artifact {
	return Artifact{Key: "nginx-1.15-4-standin", Lang: Debian,
		Images: []ImageSpec{{Ref: E2EImage("nginx:1.15-4"), Base: nginxBase,
			Files: []ImageFile{{Path: "/etc/nginx/nginx.conf", Content: nginxConf}},
			Cmd:   []string{"nginx", "-g", "daemon off;"}}},
	}
}

// dnsTestingBase is test/images/glibc-dns-testing's: Debian bookworm
// with dnsutils.
var dnsTestingBase = &Base{Suite: "bookworm", Packages: []string{"bind9-dnsutils", "ca-certificates"}}

// GlibcDNSTesting is registry.k8s.io/e2e-test-images/glibc-dns-testing:
// 2.0.0, the DNS specs' prober (dig, getent): Debian bookworm with
// dnsutils, as its Dockerfile makes it, but for the CoreDNS 1.5.0 binary
// it also unpacks at /coredns, which no conformance spec runs.
func GlibcDNSTesting() Artifact {
	return Artifact{Key: "glibc-dns-testing-2.0.0", Lang: Debian,
		Images: []ImageSpec{{Ref: E2EImage("glibc-dns-testing:2.0.0"), Base: dnsTestingBase, Cmd: []string{"bash"}}},
	}
}

// alpineOSRelease is /etc/os-release of the Alpine the agnhost family
// is on upstream: the image volume spec reads it from kitten
// ("Alpine Linux"). The stand-ins are on Debian (Alpine's packages are
// not reachable from here); LIMITS.md says so.
const alpineOSRelease = `NAME="Alpine Linux"
ID=alpine
VERSION_ID=3.21.3
PRETTY_NAME="Alpine Linux v3.21"
HOME_URL="https://alpinelinux.org/"
BUG_REPORT_URL="https://gitlab.alpinelinux.org/alpine/aports/-/issues"
`

// agnhostFiles are agnhost's image files: the binary and its link, and
// the test certificate its Dockerfile adds (the StatefulSet specs'
// readiness probe fetches /localhost.crt from test-webserver).
func agnhostFiles() []ImageFile {
	return []ImageFile{
		{Binary: "agnhost", Path: "/agnhost"}, {Path: "/agnhost-2", Link: "/agnhost"},
		{Source: "test/images/agnhost/porter/localhost.crt", Path: "/localhost.crt"},
		{Source: "test/images/agnhost/porter/localhost.key", Path: "/localhost.key"},
	}
}

// E2ETestImages are the e2e test images of Kubernetes kubeVersion's
// tree that the conformance specs run besides agnhost itself, built
// from that tree: nonewprivs (test/images/nonewprivs: nnp, setuid root,
// CMD nnp), nautilus and kitten (FROM agnhost, with their picture and
// data.json, CMD test-webserver), and agnhost 2.55, the release before,
// which the StatefulSet, DaemonSet and Deployment specs roll from and
// to: a stand-in built from this tree (they run its test-webserver and
// pause, which 2.55 has the same).
func E2ETestImages(kubeVersion string) (Artifact, error) {
	k, err := Kubernetes(kubeVersion)
	if err != nil {
		return Artifact{}, err
	}
	picture := func(name string) []ImageFile {
		return append(agnhostFiles(),
			ImageFile{Source: "test/images/" + name + "/html/" + name + ".jpg", Path: "/" + name + ".jpg"},
			ImageFile{Source: "test/images/" + name + "/html/data.json", Path: "/data.json"},
			ImageFile{Path: "/etc/os-release", Content: alpineOSRelease})
	}
	return Artifact{Key: "e2e-test-images-" + kubeVersion, Module: k.Module, Version: kubeVersion, Lang: Go, Staging: true,
		Binaries: []Binary{
			{Name: "agnhost", Package: "k8s.io/kubernetes/test/images/agnhost"},
			{Name: "nnp", Package: "k8s.io/kubernetes/test/images/nonewprivs"},
		},
		Images: []ImageSpec{
			{Ref: AgnhostImage("2.55"), Base: agnhostBase, Files: agnhostFiles(), Entrypoint: []string{"/agnhost"}, Cmd: []string{"pause"}},
			{Ref: E2EImage("nautilus:1.8"), Base: agnhostBase, Files: picture("nautilus"), Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}},
			{Ref: E2EImage("kitten:1.8"), Base: agnhostBase, Files: picture("kitten"), Entrypoint: []string{"/agnhost"}, Cmd: []string{"test-webserver"}},
			{Ref: E2EImage("nonewprivs:1.4"), Files: []ImageFile{{Binary: "nnp", Path: "/usr/local/bin/nnp", Mode: 0o4755}}, Cmd: []string{"nnp"}},
		},
	}, nil
}

// SampleAPIServer is registry.k8s.io/e2e-test-images/sample-apiserver:
// 1.29.2, the aggregator spec's extension API server: k8s.io/sample-
// apiserver v0.29.2 (test/images/sample-apiserver builds the module's
// tag of that release), ENTRYPOINT /sample-apiserver. It runs beside
// the matrix's etcd image, which the e2e set builds.
func SampleAPIServer() Artifact {
	return Artifact{Key: "sample-apiserver-1.29.2", Module: "k8s.io/sample-apiserver", Version: "v0.29.2", Lang: Go,
		Binaries: []Binary{{Name: "sample-apiserver", Package: "k8s.io/sample-apiserver"}},
		Images: []ImageSpec{{Ref: E2EImage("sample-apiserver:1.29.2"),
			Files: []ImageFile{{Binary: "sample-apiserver", Path: "/sample-apiserver"}}, Entrypoint: []string{"/sample-apiserver"}}},
	}
}
