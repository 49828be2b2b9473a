// Named points in the commit path where a test can stop the daemon, to kill it there and
// check what a restart finds (tests/integration/test_*_crash.py). Set PTCFS_FAILPOINT=<name>
// in the daemon's environment: when a thread reaches that point it logs
// "failpoint <name> reached" and waits there forever (with PTCFS_FAILPOINT=<name>:<seconds>,
// it pauses that long and goes on). Several points are armed with a comma-separated list
// (`coordinator.decided:0.2,commit.before:0.5`: tests that widen a window on every node).
// Unset (always, in production), a failpoint costs one comparison.
//
//   import.copied   an import's blobs are written and synced; nothing is committed
//   commit.before   a change is prepared (blobs synced); its metadata is not written
//   commit.written  the metadata batch is written; the new version is not yet published
//   commit.after    the new version is published; the replaced one's blobs not yet collected
//   peer.prepared   a participant prepared its part of a cluster change; it has not answered
//   coordinator.prepared  every node prepared a cluster change; nothing is decided
//   coordinator.decided   the change is decided (in etcd); no node was told to commit
//   daemon.serving  ptcfsd answers requests; metrics, the etcd watch and catch-up are not started
//   mount.refresh   a change is published; the mount's tree does not show it yet
//   s3.part.sent    the write-through tier sent a part of a multipart upload; the next is not sent
//
// Armed the same way, a switch changes what the daemon does instead of stopping it:
//
//   peer.read.damage  every peer read this node serves carries a checksum one off, as if a
//                     byte of it changed on the way (the reader must refuse the bytes)
//   etcd.lock.reply_lost  every lock this node takes in etcd is taken, and its answer then
//                     treated as lost (the take's outcome unknown to the node)
#pragma once

namespace ptcfs {

void failpoint(const char* name);
// Whether the switch `name` is armed (PTCFS_FAILPOINT names it).
bool failpoint_switch(const char* name);

}  // namespace ptcfs
