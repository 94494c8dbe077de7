package main

// The Go time zone database is built in, so that the time zones of
// maintenance windows resolve on a machine without /usr/share/zoneinfo.
import _ "time/tzdata"
