package hosts
