#!/bin/bash
# OPKE's conformance cloud: a real (Debian bookworm / OpenStack Zed) control plane on 127.0.0.1:
#   MariaDB, RabbitMQ, Keystone, Placement, Glance (file store), Nova (fake virt driver),
#   Neutron (ML2/openvswitch with a fake OVS agent record per compute host, no dataplane),
#   optionally Octavia (noop amphora/compute drivers; network driver = noop + real Neutron VIP port,
#   pylib/osreal_octavia), Swift (all-in-one, 1 replica, keystone auth) and Cinder (Cinder's fake
#   volume driver, up-cinder.sh).
# Adapted from the shared recipe (../shared/openstack): seeded like OPKE's simulator (flavors
# m1.small/medium/large, images flatcar and fedora-coreos, external network "public" on
# 203.0.113.0/24), the project "demo" with the simulator's finite quotas, 3 fake compute hosts
# (3-member anti-affinity groups), and $OSREAL_DIR/clouds.yaml with the clouds "demo" (a
# non-admin member: what OPKE and the tests use) and "admin" (the host layer reads user_data).
# Needs beside it: bin/fake_ovs_agent.py, up-octavia.sh, up-swift.sh, pylib/ (Octavia only).
# Everything runs as root; configs, state, logs, pid files and clouds.yaml go to $OSREAL_DIR
# (default /tmp/osreal). Stop everything with down.sh (same OSREAL_DIR). What this cloud cannot
# do (and the suite therefore does not ask of it) is in LIMITS.md.
#
# Env knobs: SKIP_INSTALL=1, NCOMPUTE=3 (fake compute hosts), WITH_OCTAVIA=1, WITH_SWIFT=1, WITH_CINDER=1
set -euo pipefail
SRC=$(cd "$(dirname "$0")" && pwd)
B=${OSREAL_DIR:-/tmp/osreal}; mkdir -p $B; S=$B/state; L=$B/log; R=$B/run; E=$B/etc
NCOMPUTE=${NCOMPUTE:-3}; WITH_OCTAVIA=${WITH_OCTAVIA:-1}; WITH_SWIFT=${WITH_SWIFT:-1}; WITH_CINDER=${WITH_CINDER:-1}
PW=secret; DBU=os; DBP=secret
DB="mysql+pymysql://$DBU:$DBP@127.0.0.1"
RABBIT="rabbit://guest:guest@127.0.0.1:5672/"
KS=http://127.0.0.1:5000
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin   # Debian python, not pyenv
export OS_CLIENT_CONFIG_FILE=$B/clouds.yaml OS_CLOUD=admin
T0=$(date +%s.%N)
ts() { printf '[%6.1fs] %s\n' "$(echo "$(date +%s.%N)-$T0" | bc)" "$*"; }

# ---------------------------------------------------------------- 0. packages
PKGS="mariadb-server rabbitmq-server python3-pymysql python3-openstackclient
 keystone placement-api glance-api nova-api nova-conductor nova-scheduler nova-compute nova-compute-ironic
 neutron-server uwsgi-plugin-python3 bc curl"
[ "$WITH_OCTAVIA" = 1 ] && PKGS="$PKGS octavia-api octavia-worker python3-octaviaclient"
[ "$WITH_SWIFT" = 1 ] && PKGS="$PKGS swift-proxy swift-account swift-container swift-object python3-swiftclient"
[ "$WITH_CINDER" = 1 ] && PKGS="$PKGS cinder-api cinder-scheduler cinder-volume"
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
  # no service may be started by maintainer scripts (there is no init system here anyway)
  if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi
  # a fresh machine's package lists may be empty or stale
  dpkg -s $PKGS >/dev/null 2>&1 || apt-get update -qq >$B/apt-update.log 2>&1 || { tail -30 $B/apt-update.log; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o Dpkg::Options::=--force-confold $PKGS >$B/apt-install.log 2>&1 || { tail -30 $B/apt-install.log; exit 1; }
  ts "apt-get install done"
fi

# ---------------------------------------------------------------- helpers
OSREAL_DIR=$B bash $SRC/down.sh >/dev/null 2>&1 || true
rm -rf $S $L $R; mkdir -p $S $L $R $E
start() { # start NAME CMD... : own session/process group, pid file in $R
  local n=$1; shift
  setsid "$@" </dev/null >>$L/$n.out 2>&1 &
  echo $! >$R/$n.pid
}
wait_http() { # wait_http URL [tries]
  for i in $(seq 1 ${2:-240}); do curl -s -o /dev/null -m 2 "$1" && return 0; sleep 0.5; done
  echo "timeout waiting for $1" >&2; return 1
}
authtoken() { cat <<EOC
[keystone_authtoken]
www_authenticate_uri = $KS
auth_url = $KS
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = $1
password = $PW
EOC
}

# ---------------------------------------------------------------- 1. MariaDB + RabbitMQ
mariadb-install-db --no-defaults --datadir=$S/mysql --user=root --auth-root-authentication-method=normal \
  --skip-test-db >$L/mysql-install.log 2>&1
start mysqld mariadbd --no-defaults --datadir=$S/mysql --user=root --bind-address=127.0.0.1 --port=3306 \
  --socket=$R/mysqld.sock --pid-file=$R/mysqld.real.pid --log-error=$L/mysqld.log --skip-log-bin \
  --innodb-buffer-pool-size=128M --innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 \
  --max-connections=1000 --skip-name-resolve --character-set-server=utf8mb4
mkdir -p $S/rabbit
echo '[].' >$S/rabbit/enabled_plugins
echo 'loopback_users = none' >$S/rabbit/rabbitmq.conf
RENV="HOME=$S/rabbit RABBITMQ_NODENAME=rabbit@localhost RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=5672
 ERL_EPMD_ADDRESS=127.0.0.1 RABBITMQ_MNESIA_BASE=$S/rabbit/mnesia RABBITMQ_LOG_BASE=$L/rabbit RABBITMQ_PID_FILE=$R/rabbit.real.pid
 RABBITMQ_ENABLED_PLUGINS_FILE=$S/rabbit/enabled_plugins RABBITMQ_CONFIG_FILE=$S/rabbit/rabbitmq RABBITMQ_DIST_PORT=25672"
start rabbit env $RENV RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" \
  /usr/lib/rabbitmq/bin/rabbitmq-server
SQL="mariadb --socket=$R/mysqld.sock -uroot"
for i in $(seq 1 120); do $SQL -e 'select 1' >/dev/null 2>&1 && break; sleep 0.5; done
$SQL -e "CREATE USER '$DBU'@'127.0.0.1' IDENTIFIED BY '$DBP'; CREATE USER '$DBU'@'localhost' IDENTIFIED BY '$DBP';"
for d in keystone placement glance nova_api nova nova_cell0 neutron octavia cinder; do
  $SQL -e "CREATE DATABASE $d CHARACTER SET utf8mb4; GRANT ALL ON $d.* TO '$DBU'@'127.0.0.1'; GRANT ALL ON $d.* TO '$DBU'@'localhost';"
done
ts "mariadb up"
( for i in $(seq 1 120); do for p in $(pgrep -x epmd); do grep -qz "^HOME=$S/rabbit$" /proc/$p/environ 2>/dev/null && { echo $p >$R/epmd.real.pid; exit 0; }; done; sleep 0.5; done ) &

# ---------------------------------------------------------------- 2. Keystone
mkdir -p $S/keystone
cat >$E/keystone.conf <<EOC
[DEFAULT]
log_file = $L/keystone.log
[database]
connection = $DB/keystone
[token]
provider = fernet
expiration = 86400
[fernet_tokens]
key_repository = $S/keystone/fernet-keys
[fernet_receipts]
key_repository = $S/keystone/fernet-keys
[credential]
key_repository = $S/keystone/credential-keys
EOC
KM="keystone-manage --config-file $E/keystone.conf"
$KM db_sync 2>>$L/keystone-manage.log
$KM fernet_setup --keystone-user root --keystone-group root 2>>$L/keystone-manage.log
$KM credential_setup --keystone-user root --keystone-group root 2>>$L/keystone-manage.log
$KM bootstrap --bootstrap-password $PW --bootstrap-admin-url $KS/v3/ --bootstrap-internal-url $KS/v3/ \
  --bootstrap-public-url $KS/v3/ --bootstrap-region-id RegionOne 2>>$L/keystone-manage.log
uwsgi_app() { # [PROCS=n THREADS=n] uwsgi_app NAME PORT WSGI_FILE ENV=VAL...
  local n=$1 port=$2 app=$3; shift 3
  local envs=(); for e in "$@"; do envs+=(--env "$e"); done
  start $n uwsgi_python311 --http-socket 127.0.0.1:$port --wsgi-file $app --master --processes ${PROCS:-1} --threads ${THREADS:-8} \
    --lazy-apps --die-on-term --buffer-size 65535 --add-header "Connection: close" \
    "${envs[@]}" --logto $L/$n-uwsgi.log
}
# Keystone in processes, not threads: with 8 threads, concurrent requests of two users mixed
# their roles (an application credential create of a member failed naming the admin role).
PROCS=4 THREADS=1 uwsgi_app keystone 5000 /usr/bin/keystone-wsgi-public OS_KEYSTONE_CONFIG_FILES=$E/keystone.conf
cat >$B/clouds.yaml <<EOC
clouds:
  admin:
    auth: {auth_url: "$KS/v3", username: admin, password: $PW, project_name: admin,
           user_domain_name: Default, project_domain_name: Default}
    region_name: RegionOne
    identity_api_version: 3
  demo:
    auth: {auth_url: "$KS/v3", username: demo, password: $PW, project_name: demo,
           user_domain_name: Default, project_domain_name: Default}
    region_name: RegionOne
    identity_api_version: 3
EOC
wait_http $KS/v3
ts "keystone up"
# Service users, catalog (one batch through the openstack CLI's interactive mode: ~2 s instead of ~1.4 s/call)
{
  echo "project create service"; echo "project create demo"
  echo "user create --password $PW --project demo demo"; echo "role add --project demo --user demo member"
  for r in load-balancer_member load-balancer_admin swiftoperator ResellerAdmin service; do echo "role create $r"; done
  echo "role add --project demo --user demo load-balancer_member"
  echo "role add --project admin --user admin load-balancer_admin"
  for u in placement glance nova neutron octavia swift cinder; do
    echo "user create --password $PW $u"; echo "role add --project service --user $u admin"
    echo "role add --project service --user $u service"; done
  ep() { echo "service create --name $1 $2"; for i in public internal admin; do echo "endpoint create --region RegionOne $2 $i $3"; done; }
  ep placement placement http://127.0.0.1:8778
  ep glance image http://127.0.0.1:9292
  ep nova compute http://127.0.0.1:8774/v2.1
  ep neutron network http://127.0.0.1:9696
  if [ "$WITH_OCTAVIA" = 1 ]; then ep octavia load-balancer http://127.0.0.1:9876; fi
  if [ "$WITH_SWIFT" = 1 ]; then ep swift object-store 'http://127.0.0.1:8080/v1/AUTH_%(project_id)s'; fi
  # volumev3: the type Nova's [cinder] catalog_info looks for (gophercloud takes it as block-storage)
  if [ "$WITH_CINDER" = 1 ]; then ep cinderv3 volumev3 'http://127.0.0.1:8776/v3/%(project_id)s'; fi
} | openstack >$L/keystone-bootstrap.log 2>&1
ts "keystone users/catalog done"

# ---------------------------------------------------------------- 3. Placement
cat >$E/placement.conf <<EOC
[DEFAULT]
log_file = $L/placement.log
[api]
auth_strategy = keystone
$(authtoken placement)
[placement_database]
connection = $DB/placement
EOC
placement-manage --config-file $E/placement.conf db sync >>$L/placement-manage.log 2>&1
uwsgi_app placement 8778 /usr/bin/placement-api OS_PLACEMENT_CONFIG_DIR=$E OS_PLACEMENT_CONFIG_FILES=placement.conf
ts "placement db synced"

# ---------------------------------------------------------------- 4. Glance
mkdir -p $S/glance/{images,staging,tasks}
cat >$E/glance-api.conf <<EOC
[DEFAULT]
bind_host = 127.0.0.1
bind_port = 9292
workers = 1
log_file = $L/glance-api.log
enabled_backends = fs:file
[glance_store]
default_backend = fs
[fs]
filesystem_store_datadir = $S/glance/images
[os_glance_staging_store]
filesystem_store_datadir = $S/glance/staging
[os_glance_tasks_store]
filesystem_store_datadir = $S/glance/tasks
[database]
connection = $DB/glance
$(authtoken glance)
[paste_deploy]
flavor = keystone
config_file = /etc/glance/glance-api-paste.ini
[oslo_concurrency]
lock_path = $S/glance/lock
EOC
glance-manage --config-file $E/glance-api.conf db_sync >>$L/glance-manage.log 2>&1
start glance-api glance-api --config-file $E/glance-api.conf
ts "glance db synced"

# ---------------------------------------------------------------- 5. Neutron
mkdir -p $S/neutron
cat >$E/neutron.conf <<EOC
[DEFAULT]
bind_host = 127.0.0.1
bind_port = 9696
# api_workers=0: API served by the parent process; rpc_state_report_workers=0: the RPC worker
# also takes agent reports -> 3 processes (parent, rpc worker, periodic worker)
api_workers = 0
rpc_workers = 1
rpc_state_report_workers = 0
log_file = $L/neutron-server.log
state_path = $S/neutron
api_paste_config = /etc/neutron/api-paste.ini
core_plugin = ml2
service_plugins = router,trunk
auth_strategy = keystone
transport_url = $RABBIT
allow_overlapping_ips = true
dhcp_agent_notification = false
notify_nova_on_port_status_changes = true
notify_nova_on_port_data_changes = true
# fake OVS agents report once; keep them "alive" for a year
agent_down_time = 31536000
[database]
connection = $DB/neutron
$(authtoken neutron)
[nova]
auth_url = $KS
auth_type = password
project_domain_name = Default
user_domain_name = Default
region_name = RegionOne
project_name = service
username = nova
password = $PW
[oslo_concurrency]
lock_path = $S/neutron/lock
[quotas]
quota_network = -1
quota_subnet = -1
quota_port = -1
quota_router = -1
quota_floatingip = -1
quota_security_group = -1
quota_security_group_rule = -1
[ml2]
type_drivers = flat,vlan,vxlan
tenant_network_types = vxlan
mechanism_drivers = openvswitch
extension_drivers = port_security
[ml2_type_flat]
flat_networks = public
[ml2_type_vxlan]
vni_ranges = 1:10000
[securitygroup]
enable_security_group = true
EOC
neutron-db-manage --config-file $E/neutron.conf upgrade heads >>$L/neutron-manage.log 2>&1
start neutron-server neutron-server --config-file $E/neutron.conf
ts "neutron db synced"

# ---------------------------------------------------------------- 6. Nova
mkdir -p $S/nova/instances
cat >$E/nova.conf <<EOC
[DEFAULT]
transport_url = $RABBIT
compute_driver = fake.FakeDriver
my_ip = 127.0.0.1
state_path = $S/nova
instances_path = $S/nova/instances
log_dir = $L
enabled_apis = osapi_compute
osapi_compute_listen = 127.0.0.1
osapi_compute_workers = 1
vif_plugging_is_fatal = false
vif_plugging_timeout = 0
[api]
auth_strategy = keystone
[wsgi]
api_paste_config = /etc/nova/api-paste.ini
[api_database]
connection = $DB/nova_api
[database]
connection = $DB/nova
$(authtoken nova)
# Nova sends a service token with its own calls (Cinder refuses to delete an attachment Nova
# owns without one, since OSSA-2023-003: a detach would stay "detaching" forever)
[service_user]
send_service_user_token = true
auth_url = $KS
auth_type = password
project_domain_name = Default
user_domain_name = Default
project_name = service
username = nova
password = $PW
[placement]
auth_url = $KS
auth_type = password
project_domain_name = Default
user_domain_name = Default
region_name = RegionOne
project_name = service
username = placement
password = $PW
[neutron]
auth_url = $KS
auth_type = password
project_domain_name = Default
user_domain_name = Default
region_name = RegionOne
project_name = service
username = neutron
password = $PW
[glance]
region_name = RegionOne
[cinder]
os_region_name = RegionOne
[conductor]
workers = 1
[scheduler]
workers = 1
discover_hosts_in_cells_interval = 2
[filter_scheduler]
enabled_filters = ComputeFilter,ComputeCapabilitiesFilter,ImagePropertiesFilter,ServerGroupAntiAffinityFilter,ServerGroupAffinityFilter,AvailabilityZoneFilter
[oslo_concurrency]
lock_path = $S/nova/lock
[vnc]
enabled = false
[quota]
instances = -1
cores = -1
ram = -1
server_groups = -1
server_group_members = -1
key_pairs = -1
EOC
NM="nova-manage --config-file $E/nova.conf"
$NM api_db sync >>$L/nova-manage.log 2>&1
$NM cell_v2 map_cell0 --database_connection $DB/nova_cell0 >>$L/nova-manage.log 2>&1
$NM cell_v2 create_cell --name cell1 --verbose >>$L/nova-manage.log 2>&1
$NM db sync >>$L/nova-manage.log 2>&1
ts "nova db synced"
start nova-api nova-api --config-file $E/nova.conf
start nova-conductor nova-conductor --config-file $E/nova.conf
start nova-scheduler nova-scheduler --config-file $E/nova.conf
for i in $(seq 1 $NCOMPUTE); do
  start nova-compute-$i nova-compute --config-file $E/nova.conf --config-file <(printf '[DEFAULT]\nhost = compute%s\nlog_file = %s\n' $i $L/nova-compute-$i.log)
done

wait_http http://127.0.0.1:8778/
wait_http http://127.0.0.1:9292/
wait_http http://127.0.0.1:9696/
wait_http http://127.0.0.1:8774/
ts "placement/glance/neutron/nova APIs answer"
# fake OVS agent for every compute host (neutron RPC must be ready: retry)
for i in $(seq 1 $NCOMPUTE); do
  for t in $(seq 1 30); do
    /usr/bin/python3 $SRC/bin/fake_ovs_agent.py compute$i --config-file $E/neutron.conf >>$L/fake-agent.log 2>&1 && break; sleep 2
  done
done
ts "fake OVS agents registered"

# images, flavors, public network and the demo project's quotas: the simulator's seed (batch)
head -c 1048576 /dev/zero >$S/fake-image.raw
{
  for i in flatcar fedora-coreos; do
    echo "image create --public --disk-format raw --container-format bare --file $S/fake-image.raw $i"; done
  echo "flavor create --public --vcpus 1 --ram 2048 --disk 20 m1.small"
  echo "flavor create --public --vcpus 2 --ram 4096 --disk 40 m1.medium"
  echo "flavor create --public --vcpus 4 --ram 8192 --disk 80 m1.large"
  echo "network create --external --share --provider-network-type flat --provider-physical-network public public"
  echo "subnet create --network public --subnet-range 203.0.113.0/24 --no-dhcp --gateway 203.0.113.1 public-subnet"
  echo "quota set --instances 20 --cores 80 --ram 163840 --key-pairs 100 --server-groups 10 --server-group-members 10 demo"
  echo "quota set --networks 20 --subnets 20 --ports 200 --routers 10 --floating-ips 20 --secgroups 20 --secgroup-rules 200 demo"
} | openstack >$L/resources-bootstrap.log 2>&1
ts "images/flavors/public net/quotas created"

# ---------------------------------------------------------------- 7. Octavia (noop amphora/compute drivers, real VIP port)
if [ "$WITH_OCTAVIA" = 1 ]; then
  source $SRC/up-octavia.sh
fi
# ---------------------------------------------------------------- 8. Swift (all-in-one, 1 replica)
if [ "$WITH_SWIFT" = 1 ]; then
  source $SRC/up-swift.sh
fi
# ---------------------------------------------------------------- 9. Cinder (Cinder's fake volume driver)
if [ "$WITH_CINDER" = 1 ]; then
  source $SRC/up-cinder.sh
fi
# ---------------------------------------------------------------- 10. wait for the fake hypervisors
# (nova-scheduler maps new compute hosts into cell1 every 2 s: discover_hosts_in_cells_interval)
for t in $(seq 1 180); do
  n=$(mariadb --socket=$R/mysqld.sock -uroot -N -e "select count(*) from nova_api.host_mappings" 2>/dev/null || echo 0)
  [ "$n" -ge "$NCOMPUTE" ] && break; sleep 1
done
[ "$n" -ge "$NCOMPUTE" ] || { echo "only $n of $NCOMPUTE compute hosts mapped" >&2; exit 1; }
# the demo project's load balancer quota (Octavia's own quota API; the CLI batch has no verb for it)
[ "$WITH_OCTAVIA" = 1 ] && openstack loadbalancer quota set --loadbalancer 10 demo >>$L/resources-bootstrap.log 2>&1
ts "ALL UP: $n compute hosts mapped; $(free -m | awk '/^Mem:/{print $3}') MiB of memory in use"
