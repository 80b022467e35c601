// A static member (group.instance.id, KIP-345) of a classic consumer group, driven by
// tests/server/test_server_static_membership.py against `kafkalite serve`: compiled there with javac
// against the jars tests/java-client/pom.xml fetches. It prints one line per assignment,
// "ASSIGN <generation> <member id> <partition,...>", and polls until it is killed.
//
//   StaticMember BOOTSTRAP TOPIC GROUP INSTANCE_ID SESSION_TIMEOUT_MS

import java.time.Duration;
import java.util.Collection;
import java.util.List;
import java.util.Properties;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class StaticMember {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("group.id", args[2]);
        props.put("group.instance.id", args[3]);
        props.put("session.timeout.ms", args[4]);
        props.put("heartbeat.interval.ms", "500");
        props.put("enable.auto.commit", "false");
        props.put("key.deserializer", ByteArrayDeserializer.class.getName());
        props.put("value.deserializer", ByteArrayDeserializer.class.getName());
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(args[1]), new ConsumerRebalanceListener() {
                @Override
                public void onPartitionsRevoked(Collection<TopicPartition> partitions) {}

                @Override
                public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                    String assigned = partitions.stream()
                            .map(TopicPartition::partition)
                            .sorted()
                            .map(String::valueOf)
                            .collect(Collectors.joining(","));
                    System.out.println("ASSIGN " + consumer.groupMetadata().generationId() + " "
                            + consumer.groupMetadata().memberId() + " " + assigned);
                    System.out.flush();
                }
            });
            while (true) {
                consumer.poll(Duration.ofMillis(100));
            }
        }
    }
}
