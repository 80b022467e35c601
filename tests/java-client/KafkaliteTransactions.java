// The Java client's transactional producer against `kafkalite serve` (tests/interop/test_server_java_transactions.py):
// commits, aborts, sendOffsetsToTransaction, zombie fencing, and the Admin client's
// describeTransactions / listTransactions / describeProducers. Prints one line per fact checked
// by the test.

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Properties;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.ProducerState;
import org.apache.kafka.clients.admin.TransactionDescription;
import org.apache.kafka.clients.admin.TransactionListing;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InvalidProducerEpochException;
import org.apache.kafka.common.errors.ProducerFencedException;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

public class KafkaliteTransactions {
    static KafkaProducer<String, String> producer(String bootstrap, String id) {
        Properties p = new Properties();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.TRANSACTIONAL_ID_CONFIG, id);
        p.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class.getName());
        p.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, "30000");
        return new KafkaProducer<>(p);
    }

    static void send(KafkaProducer<String, String> producer, String topic, String tag, int n) {
        for (int i = 0; i < n; i++) {
            producer.send(new ProducerRecord<>(topic, i % 2, "k" + i, tag + "-" + i));
        }
        producer.flush();
    }

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0], topic = args[1];
        KafkaProducer<String, String> p = producer(bootstrap, "java-tx");
        p.initTransactions();
        p.beginTransaction();
        send(p, topic, "commit", 10);
        p.commitTransaction();
        p.beginTransaction();
        send(p, topic, "abort", 10);
        p.abortTransaction();
        p.beginTransaction();
        send(p, topic, "offsets", 4);
        Map<TopicPartition, OffsetAndMetadata> offsets = Collections.singletonMap(new TopicPartition(topic, 0), new OffsetAndMetadata(7));
        p.sendOffsetsToTransaction(offsets, new ConsumerGroupMetadata("java-group"));
        p.commitTransaction();
        System.out.println("COMMITTED");

        // Zombie fencing: a second producer with the same transactional.id.
        p.beginTransaction();
        send(p, topic, "zombie", 2);
        KafkaProducer<String, String> newer = producer(bootstrap, "java-tx");
        newer.initTransactions();
        try {
            p.commitTransaction();
            System.out.println("ZOMBIE-COMMITTED");
        } catch (ProducerFencedException | InvalidProducerEpochException e) {
            System.out.println("FENCED " + e.getClass().getSimpleName());
        } catch (KafkaException e) {
            System.out.println("FENCED-OTHER " + e);
        }
        p.close(Duration.ofSeconds(5));
        newer.beginTransaction();
        send(newer, topic, "newer", 2);
        newer.commitTransaction();

        Properties a = new Properties();
        a.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        try (Admin admin = Admin.create(a)) {
            TransactionDescription d = admin.describeTransactions(List.of("java-tx")).description("java-tx").get();
            System.out.println("DESCRIBED " + d.state() + " " + d.producerEpoch() + " " + d.topicPartitions().size());
            for (TransactionListing l : admin.listTransactions().all().get()) {
                System.out.println("LISTED " + l.transactionalId() + " " + l.state());
            }
            List<ProducerState> active = admin.describeProducers(List.of(new TopicPartition(topic, 0)))
                .partitionResult(new TopicPartition(topic, 0)).get().activeProducers();
            System.out.println("PRODUCERS " + active.size() + " open=" + active.stream().filter(s -> s.currentTransactionStartOffset().isPresent()).count());
            long committedOffset = admin.listConsumerGroupOffsets("java-group").partitionsToOffsetAndMetadata().get()
                .get(new TopicPartition(topic, 0)).offset();
            System.out.println("GROUP-OFFSET " + committedOffset);
        }

        Properties c = new Properties();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, "java-reader");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        c.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, StringDeserializer.class.getName());
        List<String> read = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer = new KafkaConsumer<>(c)) {
            consumer.subscribe(List.of(topic));
            long deadline = System.currentTimeMillis() + 20000;
            while (read.size() < 16 && System.currentTimeMillis() < deadline) {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(500))) {
                    read.add(r.value());
                }
            }
            for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(1500))) {
                read.add(r.value());
            }
        }
        Collections.sort(read);
        System.out.println("READ " + String.join(",", read));
        newer.close(Duration.ofSeconds(5));
    }
}
