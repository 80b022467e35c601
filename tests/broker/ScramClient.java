// The Java client (org.apache.kafka:kafka-clients) authenticating to `kafkalite serve` with
// SASL/SCRAM (tests/server/test_server_sasl.py runs it as a single-file program with the broker's
// classpath). Args: bootstrap mechanism user password topic. Produces one record and reads it
// back in a group; prints "delivered OFFSET", "consumed VALUE", or "failed: EXCEPTION".
import java.time.Duration;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class ScramClient {
    public static void main(String[] args) {
        Properties props = new Properties();
        props.put("bootstrap.servers", args[0]);
        props.put("security.protocol", "SASL_PLAINTEXT");
        props.put("sasl.mechanism", args[1]);
        props.put("sasl.jaas.config", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
                + args[2] + "\" password=\"" + args[3] + "\";");
        props.put("enable.idempotence", "false"); // InitProducerId is not served yet
        props.put("max.block.ms", "10000");
        props.put("key.serializer", StringSerializer.class.getName());
        props.put("value.serializer", StringSerializer.class.getName());
        props.put("key.deserializer", StringDeserializer.class.getName());
        props.put("value.deserializer", StringDeserializer.class.getName());
        props.put("group.id", "java-scram");
        props.put("auto.offset.reset", "earliest");
        String topic = args[4];
        try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
            long offset = producer.send(new ProducerRecord<>(topic, "k", "from java " + args[1])).get().offset();
            System.out.println("delivered " + offset);
        } catch (Exception e) {
            System.out.println("failed: " + (e.getCause() != null ? e.getCause() : e));
            return;
        }
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(props)) {
            consumer.subscribe(List.of(topic));
            for (int i = 0; i < 40; i++) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    System.out.println("consumed " + r.value());
                    return;
                }
            }
            System.out.println("failed: nothing consumed");
        }
    }
}
