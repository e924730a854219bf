# The fleet as a Terraform user writes it for OpenTofu: one module per
# cluster, the same design OPKE plans (bench/seed_test.go's fleetSpec):
# a network, subnet and router; the gateway's and the nodes' security
# groups; three controllers in an anti-affinity server group and three
# workers, each on its own port, and the gateway; the API's load balancer
# with its listener, pool, members and health monitor; floating IPs for
# the API and the gateway.
terraform {
  required_providers {
    openstack = {
      source  = "terraform-provider-openstack/openstack"
      version = "3.4.0"
    }
  }
}

provider "openstack" {
  cloud = "sim"
}

variable "clusters" {
  type = number
}

data "openstack_networking_network_v2" "internet" {
  name     = "internet"
  external = true
}

module "cluster" {
  source   = "./cluster"
  for_each = toset([for i in range(var.clusters) : format("tf-%04d", i)])

  name                = each.key
  external_network_id = data.openstack_networking_network_v2.internet.id
}
