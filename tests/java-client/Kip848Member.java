// A member of a consumer-protocol group (KIP-848, group.protocol=consumer), driven by
// tests/server/test_server_kip848.py against `kafkalite serve`: compiled there with javac against the
// jars tests/java-client/pom.xml fetches. It prints "ASSIGN <partition,...>" whenever its
// assignment changes, "REC <partition> <offset>" for each record, commits after each poll that
// returned records, and on SIGTERM closes (leaving the group with member epoch -1). With a TOPIC
// of "pattern:REGEX" it subscribes with SubscriptionPattern (the server resolves the regex,
// KIP-848) and names the topic too: "ASSIGN <topic:partition,...>", "REC <topic> <partition>
// <offset>".
//
//   Kip848Member BOOTSTRAP TOPIC GROUP ASSIGNOR

import java.time.Duration;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.SubscriptionPattern;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class Kip848Member {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("group.protocol", "consumer");
        props.put("group.remote.assignor", args[3]);
        props.put("enable.auto.commit", "false");
        props.put("auto.offset.reset", "earliest");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props);
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            consumer.wakeup();
            try {
                main.join(30_000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));
        String printed = null;
        boolean byPattern = args[1].startsWith("pattern:");
        try {
            if (byPattern) {
                consumer.subscribe(new SubscriptionPattern(args[1].substring("pattern:".length())));
            } else {
                consumer.subscribe(List.of(args[1]));
            }
            while (true) {
                ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(100));
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    String topic = byPattern ? r.topic() + " " : "";
                    System.out.println("REC " + topic + r.partition() + " " + r.offset());
                }
                if (!records.isEmpty()) {
                    consumer.commitSync();
                }
                Set<TopicPartition> assigned = consumer.assignment();
                String now = byPattern
                        ? assigned.stream().map(tp -> tp.topic() + ":" + tp.partition()).sorted()
                                .collect(Collectors.joining(","))
                        : assigned.stream().map(TopicPartition::partition).sorted()
                                .map(String::valueOf).collect(Collectors.joining(","));
                if (!now.equals(printed)) {
                    System.out.println("ASSIGN " + now);
                    printed = now;
                }
                System.out.flush();
            }
        } catch (WakeupException e) {
            // SIGTERM: leave the group cleanly.
        } finally {
            consumer.close();
            System.out.println("CLOSED");
            System.out.flush();
        }
    }
}
