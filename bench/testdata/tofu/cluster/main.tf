terraform {
  required_providers {
    openstack = {
      source = "terraform-provider-openstack/openstack"
    }
  }
}

variable "name" {
  type = string
}

variable "external_network_id" {
  type = string
}

locals {
  host_cidr = "192.168.10.0/24"
}

resource "openstack_networking_network_v2" "net" {
  name = var.name
}

resource "openstack_networking_subnet_v2" "subnet" {
  name       = var.name
  network_id = openstack_networking_network_v2.net.id
  cidr       = local.host_cidr

  # Addresses Neutron picks (the workers', the load balancer's) stay clear
  # of the fixed ones (the gateway's, the controllers').
  allocation_pool {
    start = cidrhost(local.host_cidr, 100)
    end   = cidrhost(local.host_cidr, 254)
  }
}

resource "openstack_networking_router_v2" "router" {
  name                = var.name
  external_network_id = var.external_network_id
}

resource "openstack_networking_router_interface_v2" "router" {
  router_id = openstack_networking_router_v2.router.id
  subnet_id = openstack_networking_subnet_v2.subnet.id
}

resource "openstack_networking_secgroup_v2" "gateway" {
  name = "${var.name}-gateway"
}

resource "openstack_networking_secgroup_rule_v2" "gateway_ssh" {
  security_group_id = openstack_networking_secgroup_v2.gateway.id
  direction         = "ingress"
  ethertype         = "IPv4"
  protocol          = "tcp"
  port_range_min    = 22
  port_range_max    = 22
  remote_ip_prefix  = "0.0.0.0/0"
}

resource "openstack_networking_secgroup_v2" "nodes" {
  name = "${var.name}-nodes"
}

resource "openstack_networking_secgroup_rule_v2" "nodes_ssh" {
  security_group_id = openstack_networking_secgroup_v2.nodes.id
  direction         = "ingress"
  ethertype         = "IPv4"
  protocol          = "tcp"
  port_range_min    = 22
  port_range_max    = 22
  remote_group_id   = openstack_networking_secgroup_v2.gateway.id
}

resource "openstack_networking_secgroup_rule_v2" "nodes_api" {
  security_group_id = openstack_networking_secgroup_v2.nodes.id
  direction         = "ingress"
  ethertype         = "IPv4"
  protocol          = "tcp"
  port_range_min    = 6443
  port_range_max    = 6443
  remote_ip_prefix  = local.host_cidr
}

resource "openstack_networking_secgroup_rule_v2" "nodes_internal" {
  for_each          = toset(["tcp", "udp"])
  security_group_id = openstack_networking_secgroup_v2.nodes.id
  direction         = "ingress"
  ethertype         = "IPv4"
  protocol          = each.key
  port_range_min    = 1
  port_range_max    = 65535
  remote_group_id   = openstack_networking_secgroup_v2.nodes.id
}

resource "openstack_networking_secgroup_rule_v2" "nodes_node_ports" {
  for_each          = toset(["tcp", "udp"])
  security_group_id = openstack_networking_secgroup_v2.nodes.id
  direction         = "ingress"
  ethertype         = "IPv4"
  protocol          = each.key
  port_range_min    = 30000
  port_range_max    = 32767
  remote_ip_prefix  = local.host_cidr
}

resource "openstack_compute_servergroup_v2" "controllers" {
  name     = "${var.name}-controllers"
  policies = ["anti-affinity"]
}

locals {
  hosts = merge(
    { for i in range(3) : "${var.name}-controller-${i}" => { flavor = "m1.medium", group = "nodes", ip = cidrhost(local.host_cidr, 10 + i) } },
    { for i in range(3) : "${var.name}-default-${i}" => { flavor = "m1.small", group = "nodes", ip = null } },
    { "${var.name}-gateway-0" = { flavor = "m1.small", group = "gateway", ip = cidrhost(local.host_cidr, 5) } },
  )
  controllers = [for i in range(3) : "${var.name}-controller-${i}"]
}

resource "openstack_networking_port_v2" "host" {
  for_each           = local.hosts
  name               = each.key
  network_id         = openstack_networking_network_v2.net.id
  security_group_ids = [each.value.group == "gateway" ? openstack_networking_secgroup_v2.gateway.id : openstack_networking_secgroup_v2.nodes.id]

  fixed_ip {
    subnet_id  = openstack_networking_subnet_v2.subnet.id
    ip_address = each.value.ip
  }
}

resource "openstack_compute_instance_v2" "host" {
  for_each    = local.hosts
  name        = each.key
  flavor_name = each.value.flavor
  image_name  = "flatcar"

  network {
    port = openstack_networking_port_v2.host[each.key].id
  }

  dynamic "scheduler_hints" {
    for_each = contains(local.controllers, each.key) ? [1] : []
    content {
      group = openstack_compute_servergroup_v2.controllers.id
    }
  }
}

resource "openstack_lb_loadbalancer_v2" "api" {
  name          = "${var.name}-api"
  vip_subnet_id = openstack_networking_subnet_v2.subnet.id
}

resource "openstack_lb_listener_v2" "api" {
  name            = "${var.name}-api"
  protocol        = "TCP"
  protocol_port   = 6443
  loadbalancer_id = openstack_lb_loadbalancer_v2.api.id
}

resource "openstack_lb_pool_v2" "api" {
  name        = "${var.name}-api"
  protocol    = "TCP"
  lb_method   = "ROUND_ROBIN"
  listener_id = openstack_lb_listener_v2.api.id
}

resource "openstack_lb_member_v2" "api" {
  for_each      = toset(local.controllers)
  name          = each.key
  pool_id       = openstack_lb_pool_v2.api.id
  address       = local.hosts[each.key].ip
  protocol_port = 6443
  subnet_id     = openstack_networking_subnet_v2.subnet.id
}

resource "openstack_lb_monitor_v2" "api" {
  name        = "${var.name}-api"
  pool_id     = openstack_lb_pool_v2.api.id
  type        = "TCP"
  delay       = 5
  timeout     = 5
  max_retries = 3
}

resource "openstack_networking_floatingip_v2" "api" {
  pool       = "internet"
  port_id    = openstack_lb_loadbalancer_v2.api.vip_port_id
  depends_on = [openstack_networking_router_interface_v2.router]
}

resource "openstack_networking_floatingip_v2" "gateway" {
  pool       = "internet"
  port_id    = openstack_networking_port_v2.host["${var.name}-gateway-0"].id
  depends_on = [openstack_networking_router_interface_v2.router]
}
