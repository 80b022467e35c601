// eos: franz-go's GroupTransactSession doing consume-transform-produce, for
// tests/interop/test_server_eos_clients.py. It writes PRODUCE records to IN (none when 0), then, as a
// member of GROUP (on the consumer protocol, KIP-848, or the classic one), reads IN
// read_committed and, in transactions of at most 20 records, writes "out-<value>" to OUT for
// each and commits the group's offsets with them (TxnOffsetCommit naming the member and its
// epoch or generation). It prints "COMMITTED <records>" after each committed transaction and
// "DONE <records> <aborted ends>" once EXPECT records went through committed transactions.
//
// Usage: eos BOOTSTRAP IN OUT GROUP consumer|classic PRODUCE EXPECT
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) != 8 {
		fail("usage: eos BOOTSTRAP IN OUT GROUP consumer|classic PRODUCE EXPECT")
	}
	bootstrap, in, out, group, protocol := os.Args[1], os.Args[2], os.Args[3], os.Args[4], os.Args[5]
	produce, err := strconv.Atoi(os.Args[6])
	if err != nil {
		fail("PRODUCE: %v", err)
	}
	count, err := strconv.Atoi(os.Args[7])
	if err != nil {
		fail("EXPECT: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	producer, err := kgo.NewClient(kgo.SeedBrokers(bootstrap))
	if err != nil {
		fail("client: %v", err)
	}
	records := make([]*kgo.Record, produce)
	for i := range records {
		records[i] = &kgo.Record{Topic: in, Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}
	}
	if err := producer.ProduceSync(ctx, records...).FirstErr(); err != nil {
		fail("producing the input: %v", err)
	}
	producer.Close()

	opts := []kgo.Opt{
		kgo.SeedBrokers(bootstrap),
		kgo.TransactionalID("eos-" + group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.RequireStableFetchOffsets(),
	}
	switch protocol {
	case "consumer":
		// KIP-848: the coordinator assigns; franz-go needs the range or sticky balancer for it.
		opts = append(opts, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
	case "classic":
		// A replacement after a crash gets the partitions once the dead member's session ends.
		opts = append(opts, kgo.SessionTimeout(6*time.Second))
	default:
		fail("protocol must be consumer or classic, not %q", protocol)
	}
	session, err := kgo.NewGroupTransactSession(opts...)
	if err != nil {
		fail("session: %v", err)
	}
	defer session.Close()

	done, aborted := 0, 0
	for done < count {
		fetches := session.PollRecords(ctx, 20)
		if ctx.Err() != nil {
			fail("timed out with %d of %d records committed (%d ends aborted)", done, count, aborted)
		}
		fetches.EachError(func(topic string, partition int32, err error) {
			fmt.Fprintf(os.Stderr, "fetch error %s-%d: %v\n", topic, partition, err)
		})
		if fetches.NumRecords() == 0 {
			continue
		}
		if err := session.Begin(); err != nil {
			fail("begin: %v", err)
		}
		n := 0
		fetches.EachRecord(func(r *kgo.Record) {
			n++
			session.Produce(ctx, &kgo.Record{Topic: out, Key: r.Key, Value: append([]byte("out-"), r.Value...)}, nil)
		})
		// A crash test's kill lands inside a transaction more often than not.
		time.Sleep(20 * time.Millisecond)
		committed, err := session.End(ctx, kgo.TryCommit)
		if err != nil {
			fail("end: %v", err)
		}
		if committed {
			done += n
			fmt.Printf("COMMITTED %d\n", done)
		} else {
			aborted++
		}
	}
	fmt.Printf("DONE %d %d\n", done, aborted)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "eos: "+format+"\n", args...)
	os.Exit(1)
}
